#!/usr/bin/env python3
"""Checks a sample grid PNG (8-bit gray or RGB, not interlaced, as wick writes them) with the standard library only:
its width is N_COLUMNS cells of CELL_W pixels plus 2-pixel padding, and each of the first N_CELLS cells (row by row,
cells CELL_H pixels high, rows ROW_H pixels apart) holds more than one colour, i.e. is not a constant image.
Prints the size and the distinct colours per cell; exits 1 when a check fails.

    png_cells.py GRID.png CELL_W CELL_H N_COLUMNS ROW_H N_CELLS
"""
import struct
import sys
import zlib


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    at, idat, header = 8, b"", None
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (0, 2) and interlace == 0, f"{path}: unexpected PNG format {header}"
    channels = 1 if colour == 0 else 3
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, corner = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(line)
        previous = line
    return width, height, channels, rows


def main():
    path = sys.argv[1]
    cell_w, cell_h, n_columns, row_h, n_cells = map(int, sys.argv[2:7])
    width, height, channels, rows = read_png(path)
    ok = width == n_columns * (cell_w + 2) + 2
    distinct = []
    for cell in range(n_cells):
        x0, y0 = 2 + (cell % n_columns) * (cell_w + 2), 2 + (cell // n_columns) * row_h
        colours = {bytes(rows[y][x * channels:(x + 1) * channels]) for y in range(y0, y0 + cell_h)
                   for x in range(x0, x0 + cell_w)}
        distinct.append(len(colours))
    ok = ok and height >= 2 + ((n_cells + n_columns - 1) // n_columns) * row_h and all(d > 1 for d in distinct)
    print(f"{path}: {width} x {height}, {channels} channels; distinct colours per cell: {distinct}"
          f" (expected width {n_columns * (cell_w + 2) + 2})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
