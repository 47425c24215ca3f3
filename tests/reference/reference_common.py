"""What the reference scripts share that needs only the standard library: the repository's folders, reading and
rewriting safetensors headers, and the command-line and printing conventions of the fixture writers.

    import reference_common as common       # the script's own folder is on sys.path when it runs
    OUT_DIR = common.data_dir("flux")        # <repo>/tests/data/flux
    common.sort_metadata(path)               # a file the safetensors package wrote, metadata keys sorted
    header, data_start = common.read_header(path)

Scripts are run from the repository root as `python3 tests/reference/<script>.py`; Python puts tests/reference on
sys.path, so `import reference_common` finds this file. The torch helpers are in reference_torch.py. Scripts that the
C++ suite runs with a plain python3 (comfyui_lora_keys.py) import this module: keep it standard-library only.
"""
import json
import os
import struct
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def data_dir(name):
    """<repo>/tests/data/<name>, an absolute path (whatever the working directory)."""
    return os.path.join(REPO, "tests", "data", name)


def output_dir_argument(default):
    """The output folder a fixture writer takes as its only argument (`make_x.py [OUT_DIR]`), else `default`."""
    return sys.argv[1] if len(sys.argv) > 1 else default


def require_repo_root():
    """Exits with a message unless the working directory is the repository root (scripts with relative paths)."""
    if not os.path.isdir("tests/reference"):
        sys.exit("run from the repository root")


def single_threaded_tokenizers():
    """One thread in Hugging Face's Rust tokenizers (TOKENIZERS_PARALLELISM, RAYON_NUM_THREADS). Call it before
    tokenizers / transformers are imported."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"


# ---------------------------------------------------------------------------------------------------------------
# safetensors headers: 8 bytes little-endian length N, N bytes of JSON padded with spaces to a multiple of 8, data.
# ---------------------------------------------------------------------------------------------------------------

def read_header(path):
    """(header, data_start): the JSON header in file order ("__metadata__" included when present) and the offset of
    the data section. Reads only the header, so it is cheap on multi-gigabyte checkpoints."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n).decode("utf-8")), 8 + n


def frame_header(text):
    """The header bytes as stored: the length prefix, then `text` (UTF-8 JSON) padded with spaces to 8 bytes."""
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text


def encode_header(header):
    """A header dict as the safetensors package writes it: compact JSON, non-ASCII kept as UTF-8, framed."""
    return frame_header(json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def sort_metadata(path):
    """Rewrites a safetensors header with the metadata keys sorted and first (the package's Rust writer puts them in
    hash order, which changes from run to run), so that a rerun writes byte-identical files. Tensors are untouched."""
    header, data_start = read_header(path)
    meta = header.pop("__metadata__", None)
    canonical = {}
    if meta is not None:
        canonical["__metadata__"] = dict(sorted(meta.items()))
    canonical.update(header)
    with open(path, "rb") as f:
        f.seek(data_start)
        data = f.read()
    with open(path, "wb") as f:
        f.write(encode_header(canonical) + data)


# ---------------------------------------------------------------------------------------------------------------
# Summaries printed at the end of a run.
# ---------------------------------------------------------------------------------------------------------------

def print_file_sizes(folder):
    """Every file under `folder`, sorted, as '<bytes right-aligned in 9> <path>'."""
    for root, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            path = os.path.join(root, name)
            print(f"{os.path.getsize(path):>9} {path}")


def print_total_size(folder):
    """'total <bytes> bytes in <folder relative to the repository>'."""
    total = 0
    for root, _, files in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"total {total} bytes in {os.path.relpath(folder, REPO)}")
