#!/usr/bin/env python3
"""Generates tests/data/clip_tokenizer/: a deterministic corpus of 2,400 adversarial captions, the token ids three
reference tokenizers give for each, a sweep of every Unicode code point through transformers' normalizer and
pre-token classes, and the folder cases (tokenizer_config.json / special_tokens_map.json variants). See
tests/data/clip_tokenizer/README.md for every file and tensor.

Made with (pip, CPU only): transformers 5.24.0 (tokenizers 0.23.3), open-clip-torch 3.3.0, ftfy 6.3.1,
regex 2026.11.19, safetensors 0.8.0, numpy 2.4.6, Python 3.11. Run from the repository root:
    /tmp/venv/bin/pip install transformers open-clip-torch ftfy safetensors numpy
    /tmp/venv/bin/python tests/reference/make_clip_tokenizer_fixtures.py
A rerun writes byte-identical files (one seeded random.Random; safetensors metadata with sorted keys).

References (all on open_clip's bpe_simple_vocab_16e6.txt.gz, copied here unchanged):
  transformers       CLIPTokenizer(vocab=..., merges=...) built in memory from that file as MODELS.md 4.1 says
                     (pad "<|endoftext|>" = 49407, model_max_length 77): CLIP-L's tokenizer in SD/SDXL/SD3/Flux.
  transformers_bigg  the same with pad_token="!" (id 0): SDXL's tokenizer_2 / SD3's clip_g convention.
  open_clip          open_clip.get_tokenizer("ViT-L-14") (SimpleTokenizer: ftfy, html.unescape twice, pads with 0).
Each is called as tokenizer(captions, padding="max_length", max_length=77, truncation=True) (open_clip: its
__call__), and the script asserts that every window is [BOS, content..., EOS, pad...] with the attention mask
covering BOS..EOS, so storing the unpadded prefix loses nothing.
"""
import hashlib
import html
import html.entities
import json
import os
import random
import shutil
import sys
import tempfile
import time
import unicodedata

from reference_common import single_threaded_tokenizers

single_threaded_tokenizers()  # one core, for the speed line of the summary
import ftfy  # noqa: E402
import numpy as np  # noqa: E402
import open_clip  # noqa: E402
from open_clip.tokenizer import default_bpe  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from tokenizers import Regex, pre_tokenizers  # noqa: E402
from transformers import CLIPTokenizer  # noqa: E402

from reference_torch import clip_vocabulary  # noqa: E402

OUT = "tests/data/clip_tokenizer"
BPE_SHA256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"
CONTEXT = 77
N_CAPTIONS = 2400


# ---------------------------------------------------------------------------------------------------------------
# The reference tokenizers.

def windows_transformers(tokenizer, captions, pad_id):
    encoded = tokenizer(captions, padding="max_length", max_length=CONTEXT, truncation=True)
    out = []
    for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"]):
        n = sum(mask)
        assert len(ids) == CONTEXT and mask == [1] * n + [0] * (CONTEXT - n)
        assert ids[0] == 49406 and ids[n - 1] == 49407 and all(i == pad_id for i in ids[n:])
        out.append(ids[:n])
    return out


def windows_open_clip(tokenizer, captions):
    tensor = tokenizer(captions).tolist()
    out = []
    for caption, ids in zip(captions, tensor):
        n = min(len(tokenizer.encode(caption)) + 2, CONTEXT)
        assert ids[0] == 49406 and ids[n - 1] == 49407 and all(i == 0 for i in ids[n:])
        out.append(ids[:n])
    return out


# ---------------------------------------------------------------------------------------------------------------
# The corpus: (kind, caption) pairs. Every kind is listed in KINDS; the C++ test reports differences by kind.

KINDS = ["plain", "scripts", "emoji", "combining", "fullwidth", "punctuation", "numbers", "apostrophes", "long",
         "empty", "special", "html", "mojibake", "sigma", "turkish", "exclamation", "controls", "blocks", "mixed",
         "replaced_utf8"]

NOUNS = ["cat", "dog", "woman", "man", "child", "car", "house", "tree", "mountain", "river", "city", "robot", "castle",
         "flower", "bird", "horse", "boat", "forest", "street", "portrait", "painting", "sculpture", "dragon", "astronaut",
         "teapot", "bicycle", "lighthouse", "cathedral", "waterfall", "spaceship", "guitar", "owl", "fox", "whale"]
ADJECTIVES = ["red", "blue", "tiny", "huge", "old", "futuristic", "cozy", "dark", "golden", "misty", "neon", "vintage",
              "surreal", "minimalist", "ornate", "weathered", "glowing", "snowy", "rusty", "elegant", "photorealistic"]
PLACES = ["on a beach", "in the rain", "at sunset", "in a forest", "on the moon", "in Tokyo", "under water",
          "in a studio", "on a table", "in the snow", "at night", "in Paris", "on Mars", "in a library"]
STYLES = ["trending on artstation", "8k", "highly detailed", "by greg rutkowski", "oil on canvas", "35mm photo",
          "octane render", "unreal engine 5", "studio lighting", "bokeh", "masterpiece", "best quality", "4k uhd"]

SCRIPT_WORDS = [
    "Καλημέρα κόσμε", "Ελληνικά γράμματα", "Привет мир", "Съешь же ещё этих мягких французских булок", "Їжак і ґанок",
    "مرحبا بالعالم", "القطة على السجادة", "שלום עולם", "חתול שחור", "नमस्ते दुनिया", "हिन्दी भाषा", "สวัสดีชาวโลก",
    "แมวสีดำ", "你好世界", "一只可爱的猫", "山水画", "こんにちは世界", "カタカナとひらがな", "東京の夜景",
    "안녕하세요 세계", "고양이 사진", "გამარჯობა", "Բարեւ աշխարհ", "ሰላም ዓለም", "வணக்கம் உலகம்", "నమస్కారం",
    "ಕನ್ನಡ", "മലയാളം", "ગુજરાતી", "ਪੰਜਾਬੀ", "বাংলা ভাষা", "සිංහල", "ພາສາລາວ", "ភាសាខ្មែរ", "မြန်မာ", "བོད་ཡིག",
    "ᠮᠣᠩᠭᠣᠯ", "ᏣᎳᎩ", "ᐃᓄᒃᑎᑐᑦ", "ߒߞߏ", "ⵜⴰⵎⴰⵣⵉⵖⵜ", "Tiếng Việt có dấu", "Ngày xưa", "Ærøskøbing", "Þórshöfn",
    "Straße Größe", "ĳsselmeer", "Łódź", "Čeština", "Ğüzel", "Dziękuję", "Österreich", "façade naïve café", "Ångström",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝 𝐦𝐚𝐭𝐡", "𝓢𝓬𝓻𝓲𝓹𝓽", "ꓮꓯ", "𐌰𐌱𐌲", "𓀀𓀁", "𒀀𒀁", "ᚠᚢᚦ", "ⴰⴱ", "ꦗꦮ",
]
EMOJI = ["😀", "🐱", "🐶", "🚀", "🌈", "🔥", "❤️", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🏴‍☠️", "👩🏾‍💻", "🧑‍🚀", "🇯🇵",
         "🇺🇸🇫🇷", "1️⃣", "#️⃣", "©️", "✨", "🎨", "🖼️", "😂😂😂", "🤖", "🦊", "🌸", "☕", "🍕", "👁️‍🗨️", "🫠", "🏳️‍⚧️"]
COMBINING = ["e\u0301", "a\u0308\u0301", "q\u0307", "n\u0303", "o\u0328\u0304", "\u1100\u1161\u11a8",
             "\u0915\u094d\u0937", "a\u20dd", "x\u0336y\u0336", "Z\u0351\u0359\u0322a\u0360l\u0315g\u0334o", "\u0301",
             "\u0627\u064e", "\u05e9\u05c1\u05b8", "i\u0307", "A\u030a", "\u212b", "\u2126", "\uf900", "\u0344", "\u0958"]
FULLWIDTH = ["ＡＢＣ", "ｆｕｌｌｗｉｄｔｈ", "１２３", "！？", "（テスト）", "ｈｅｌｌｏ　ｗｏｒｌｄ", "ｶﾀｶﾅ", "￥１００", "＠ｕｓｅｒ",
             "＃ｔａｇ", "ＯＫ！"]
PUNCTUATION = ["...", "!!!", "???", "?!", "--", "—", "–", "~~~", "(*&^%$#@!)", "[[brackets]]", "{curly}", "<angle>",
               "a,b,c", "end.", "\"quoted\"", "“curly quotes”", "‘single’", "«guillemets»", "„low“", "…", "•", "§¶",
               "/\\|", "_under_score_", "a++", "c#", "e-mail", "semi;colon", "col:on", "@handle", "#hashtag", "100%",
               "$5", "€10", "£", "¥", "©®™", "°C", "±", "×÷", "≠≤≥", "∞", "√", "→←↑↓", "★☆", "♪♫", "((masterpiece))",
               "[best quality:1.2]", "<lora:foo:0.8>", "{a|b|c}", "(((((x)))))", ":)", ":-(", ";)", "^_^", "¯\\_(ツ)_/¯"]
NUMBERS = ["1", "42", "2024", "1234567890", "3.14159", "1,000,000", "0.5", "1e10", "-273.15", "007", "12:30",
           "1920x1080", "٣٤٥", "۱۲۳", "१२३", "๑๒๓", "²³", "½¾", "Ⅻ", "ⅻ", "①②③", "〇一二三", "𝟙𝟚𝟛", "٫", "1st 2nd 3rd",
           "99999999999999999999", "3/4", "v1.5", "sd_xl", "f/2.8", "ISO 800", "24mm"]
APOSTROPHES = ["it's", "don't", "they're", "we've", "I'm", "you'll", "he'd", "IT'S", "DON'T", "rock 'n' roll",
               "''s", "'S", "o'clock", "rock'n'roll", "'tis", "the dog's bone", "dogs'", "it’s", "don’t", "'", "''",
               "'s'", "'re're", "'ll'd", "'ve", "'m", "'x", "a'b'c", "'ſ", "L'ÉTÉ", "l'été", "'Ｓ", "ʼs", "`s"]
SPECIAL = ["<|startoftext|>", "<|endoftext|>", "<|ENDOFTEXT|>", "<|StartOfText|>", "<end_of_text>", "<start_of_text>",
           "<END_OF_TEXT>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "x <|startoftext|>hi", "<|endoftext",
           "|endoftext|>", "<|endoftext|>!", "!<|startoftext|>!", "<<|endoftext|>>", "< |endoftext| >",
           "<|endoftext|>" * 3, "<|endoftext|> <|endoftext|>", "<ſtart_of_text>"]
HTML = ["&amp;", "&amp;amp;", "&amp;amp;amp;", "&lt;b&gt;bold&lt;/b&gt;", "&#39;", "&#x27;", "&#X27;", "&nbsp;",
        "&eacute;", "&copy", "&copy;2024", "&notit;", "&notin;", "&#128;", "&#0;", "&#x110000;", "&#65", "&#x41;",
        "&#99999999999;", "&quot;hi&quot;", "AT&amp;T", "&#8217;s", "&hellip;", "&mdash;", "&unknown;", "&", "& ",
        "&&", "&;", "&#;", "&#x;", "&AMP;", "&AMP", "&ampxyz", "&amp;lt;", "&#38;amp;", "&lt;|endoftext|&gt;",
        "&NotNestedGreaterGreater;", "&fjlig;", "&#127;", "&#13;", "&#11;", "&#65534;", "&#xD800;", "&#x1F600;"]
MOJIBAKE = ["cafÃ©", "Ã¼ber", "â€™", "â€œquotedâ€\x9d", "ðŸ˜€", "Ã\xa0 la carte", "naÃ¯ve", "SchÃ¶n", "Ã©tÃ©",
            "Ð¿Ñ€Ð¸Ð²ÐµÑ‚", "\u00c3\u00a9", "â\x80\x99", "ã“ã‚“ã«ã¡ã¯", "Â£100", "Ã…ngstrÃ¶m"]
SIGMA = ["ΟΔΟΣ", "ΣΙΣΥΦΟΣ", "Σ", "ΣΑ", "ΑΣ ΑΣ", "ΑΣ.", "ΑΣ'", "Σ1", "ΟΔΌΣ", "ὈΔΥΣΣΕΎΣ", "ΑΣ\u0301", "aΣ", "ΣΣ"]
TURKISH = ["İstanbul", "DİYARBAKIR", "ı", "I", "İ", "iİıI", "İi̇", "KIRMIZI", "ŞİŞLİ", "Iğdır"]
EXCLAMATION = ["wow!!!", "hello!", "!!!", "!a!b!", "!", "yes! no!", "!!!!!!!!!!", "hi!?", "¡hola!", "‼", "！"]
CONTROLS = ["a\x00b", "a\x1cb", "a\x1fb", "a\x7fb", "a\x85b", "a\u200bb", "a\ufeffb", "a\u200db", "a\u00adb",
            "a\x1b[31mred\x1b[0m", "a\tb", "a\nb", "a\r\nb", "a\x0bb", "a\x0cb", "a\u2028b", "a\u2029b", "a\u3000b",
            "a\u00a0b", "a\u1680b", "a\u202fb", "a\u205fb", "a\u180eb", "a\u2060b", "\ufffd", "a\u0085\u0085b"]
WHITESPACE_ONLY = ["", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\u00a0", "\u2028", " \t\n ", "\x1c", "\u200b"]
# Bytes that are not UTF-8, as Python's bytes.decode("utf-8", "replace") reads them; the C++ test feeds the raw
# bytes and expects the ids of this replaced text (README: replaced_utf8.json lists the pairs).
INVALID_UTF8 = [b"caf\xc3", b"\xff\xfe", b"a\x80b", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xc0\xaf", b"ok\xe2\x82",
                b"\xf4\x90\x80\x80", b"\xe0\x80\x80x", b"abc\xf8\x88\x80\x80\x80"]


def random_block_text(rng, sweep_ranges):
    """A few assigned code points (Python 3.11 = Unicode 14.0) from one random 256-code-point block."""
    while True:
        base = rng.choice(sweep_ranges)
        chars = [chr(c) for c in range(base, base + 256)
                 if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
        if len(chars) >= 8:
            return "".join(rng.choice(chars) for _ in range(rng.randint(3, 12)))


def plain_caption(rng):
    parts = [rng.choice(["a photo of", "an image of", "a painting of", "a close-up of", "A", "Two", "the"]),
             rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(PLACES)]
    caption = " ".join(parts)
    if rng.random() < 0.6:
        caption += ", " + ", ".join(rng.sample(STYLES, rng.randint(1, 4)))
    if rng.random() < 0.2:
        caption = caption.upper() if rng.random() < 0.5 else caption.title()
    return caption


def build_corpus():
    rng = random.Random(20251124)
    blocks = list(range(0, 0x30000, 256)) + list(range(0xE0000, 0xE0100, 256))
    pools = {"scripts": SCRIPT_WORDS, "emoji": EMOJI, "combining": COMBINING, "fullwidth": FULLWIDTH,
             "punctuation": PUNCTUATION, "numbers": NUMBERS, "apostrophes": APOSTROPHES, "special": SPECIAL,
             "html": HTML, "mojibake": MOJIBAKE, "sigma": SIGMA, "turkish": TURKISH, "exclamation": EXCLAMATION,
             "controls": CONTROLS}
    corpus = []
    # Every listed string once on its own, then in context.
    for kind, pool in pools.items():
        corpus += [(kind, s) for s in pool]
    corpus += [("empty", s) for s in WHITESPACE_ONLY]
    corpus += [("replaced_utf8", b.decode("utf-8", "replace")) for b in INVALID_UTF8]
    for kind, pool in pools.items():
        for _ in range(60):
            a, b = rng.choice(pool), rng.choice(pool)
            corpus.append((kind, rng.choice([f"{plain_caption(rng)} {a}", f"{a} {rng.choice(NOUNS)}{b}",
                                             f"{rng.choice(NOUNS)}{a}{rng.choice(NOUNS)}", f"{a}{b}", f"{a} {b}"])))
    for _ in range(40):
        corpus.append(("empty", "".join(rng.choice([" ", "\t", "\n", "\u3000", "\u00a0", "\r"])
                                        for _ in range(rng.randint(1, 6)))))
    for _ in range(150):
        corpus.append(("blocks", random_block_text(rng, blocks)))
    for _ in range(80):  # long: well past 75 tokens
        words = [plain_caption(rng) for _ in range(rng.randint(5, 12))]
        if rng.random() < 0.3:
            words.insert(rng.randint(0, len(words)), rng.choice(SCRIPT_WORDS + EMOJI))
        corpus.append(("long", ", ".join(words)))
    corpus.append(("long", "a " * 80))
    corpus.append(("long", "word " * 74 + "end"))   # exactly 75 content tokens
    corpus.append(("long", "word " * 75 + "end"))   # 76: one truncated
    corpus.append(("long", "x" * 2000))
    corpus.append(("long", "😀" * 100))
    everything = sum(pools.values(), []) + WHITESPACE_ONLY
    while len(corpus) < N_CAPTIONS - 700:
        corpus.append(("plain", plain_caption(rng)))
    while len(corpus) < N_CAPTIONS:
        pieces = [plain_caption(rng)] + [rng.choice(everything) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.3:
            pieces.append(random_block_text(rng, blocks))
        rng.shuffle(pieces)
        corpus.append(("mixed", rng.choice([" ", "", ", "]).join(pieces)))
    assert len(corpus) == N_CAPTIONS and all(k in KINDS for k, _ in corpus)
    for _, caption in corpus:
        caption.encode("utf-8")  # no lone surrogates
    return corpus


# ---------------------------------------------------------------------------------------------------------------
# The code point sweep: transformers' normalizer output of each code point alone, and the pre-token pattern's
# classes (tokenizers' Oniguruma \p{L}, \p{N}, \s).

def code_point_sweep(tokenizer):
    normalizer = tokenizer.backend_tokenizer.normalizer
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    changed_cps, changed_offsets, changed_values = [], [0], []
    for c in cps:
        out = normalizer.normalize_str(chr(c))
        if out != chr(c):
            changed_cps.append(c)
            changed_values += [ord(x) for x in out]
            changed_offsets.append(len(changed_values))
    text = "".join(chr(c) for c in cps)

    def ranges(pattern):
        # "removed" leaves the runs that do not match, with offsets in characters (one per code point).
        outside = bytearray(len(cps))
        for piece, (begin, end) in pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text):
            assert piece == text[begin:end]
            outside[begin:end] = b"\x01" * (end - begin)
        out, start, previous = [], None, None
        for i, c in enumerate(cps):
            if outside[i]:
                continue
            if start is None or c != previous + 1:
                if start is not None:
                    out.append((start, previous))
                start = c
            previous = c
        if start is not None:
            out.append((start, previous))
        return out

    return changed_cps, changed_offsets, changed_values, {name: ranges(p) for name, p in
                                                          [("letter", r"\p{L}"), ("number", r"\p{N}"), ("space", r"\s")]}


# ---------------------------------------------------------------------------------------------------------------
# Folder cases: the files of SD/SDXL model folders (tokenizer/ and tokenizer_2/, transformers 4.x era, where
# bos/eos/unk are AddedToken objects with "normalized": true) and of a transformers 5 save_pretrained, read back
# with CLIPTokenizer.from_pretrained; the C++ test writes vocab.json + merges.txt beside each.

def added(content, normalized):
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": normalized, "rstrip": False,
            "single_word": False}


def folder_variants():
    def legacy(pad):
        config = {"add_prefix_space": False, "bos_token": added("<|startoftext|>", True), "do_lower_case": True,
                  "eos_token": added("<|endoftext|>", True), "errors": "replace", "model_max_length": 77,
                  "name_or_path": "openai/clip-vit-large-patch14", "pad_token": pad,
                  "special_tokens_map_file": "./special_tokens_map.json", "tokenizer_class": "CLIPTokenizer",
                  "unk_token": added("<|endoftext|>", True)}
        strip = lambda v: {k: x for k, x in v.items() if k != "__type"} if isinstance(v, dict) else v
        special_map = {k: strip(v) for k, v in config.items() if k.endswith("_token")}
        return {"tokenizer_config.json": config, "special_tokens_map.json": special_map}

    v5_decoder = {"0": {"content": "!", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True},
                  "49406": {"content": "<|startoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
                            "single_word": False, "special": True},
                  "49407": {"content": "<|endoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
                            "single_word": False, "special": True}}
    return {
        "sdxl_tokenizer": legacy("<|endoftext|>"),
        "sdxl_tokenizer_2": legacy("!"),
        "added_tokens_decoder": {"tokenizer_config.json": {
            "added_tokens_decoder": v5_decoder, "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
            "model_max_length": 77, "pad_token": "!", "tokenizer_class": "CLIPTokenizer",
            "unk_token": "<|endoftext|>"}},
        "no_config": {},
        "max_length_64": {"tokenizer_config.json": {"model_max_length": 64, "pad_token": "<|endoftext|>"}},
    }


FOLDER_CAPTIONS = ["a photo of a cat", "<|ENDOFTEXT|> x", "<|STARTOFTEXT|> y", "a<|endoftext|>b", "wow!!! ΟΔΟΣ",
                   "ab<|startoftext|>", "x <|EndOfText|>!", "hello " * 40, ""]


def folder_cases(vocab, merges):
    cases = {}
    for name, files in folder_variants().items():
        with tempfile.TemporaryDirectory() as d:
            json.dump(vocab, open(os.path.join(d, "vocab.json"), "w"))
            with open(os.path.join(d, "merges.txt"), "w") as f:
                f.write("#version: 0.2\n" + "\n".join(a + " " + b for a, b in merges) + "\n")
            for file_name, content in files.items():
                json.dump(content, open(os.path.join(d, file_name), "w"), indent=2)
            tokenizer = CLIPTokenizer.from_pretrained(d)
            length = tokenizer.model_max_length if tokenizer.model_max_length < 10**6 else CONTEXT
            encoded = tokenizer(FOLDER_CAPTIONS, padding="max_length", max_length=length, truncation=True)
            cases[name] = {"files": files, "pad_id": tokenizer.pad_token_id, "context_length": length,
                           "ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
    return {"captions": FOLDER_CAPTIONS, "variants": cases}


def html_cases():
    """Python's html.unescape on every named reference (with and without its semicolon, then followed by more
    name characters: the longest-prefix rule for the legacy names), numeric references and edge cases."""
    names = sorted(html.entities.html5)
    cases = list(HTML)
    for i in range(0, len(names), 40):
        cases.append("".join("&" + n for n in names[i:i + 40]))
        cases.append(" ".join("&" + n.rstrip(";") + "x;" for n in names[i:i + 40]))
    cases.append("".join(f"&#{i};" for i in range(0, 320)))
    cases.append("".join(f"&#x{i:x}" for i in range(0x70, 0xB0)))
    cases += [f"&#{c};" for c in (0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFDCF, 0xFDD0, 0xFDEF, 0xFDF0, 0xFFFD, 0xFFFE,
                                  0xFFFF, 0x10000, 0x1FFFE, 0x10FFFF, 0x110000, 10**30)]
    cases += ["&" + "a" * 40 + ";", "&amp" + "x" * 40, "&amp\u00e9;", "&\u00e9;", "&lt\r;", "&am\x0bp;", "&copy\u00e9",
              "&#12a", "&#x1g", "&#xx41;", "&&amp;", "&#&#65;", "&lt;&lt", "&amp;amp;amp;"]
    return [[c, html.unescape(c)] for c in cases]


# ---------------------------------------------------------------------------------------------------------------

def u16(lists):
    flat = np.array([i for ids in lists for i in ids], dtype=np.uint16)
    lengths = np.array([len(ids) for ids in lists], dtype=np.uint8)
    return flat, lengths


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(default_bpe(), "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == BPE_SHA256, "open_clip's bpe_simple_vocab_16e6.txt.gz changed"
    shutil.copyfile(default_bpe(), os.path.join(OUT, "bpe_simple_vocab_16e6.txt.gz"))

    vocab, merges = clip_vocabulary(default_bpe())
    clip_l = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=CONTEXT)
    big_g = CLIPTokenizer(vocab=vocab, merges=merges, pad_token="!", model_max_length=CONTEXT)
    oc = open_clip.get_tokenizer("ViT-L-14")
    assert clip_l.pad_token_id == 49407 and big_g.pad_token_id == 0

    corpus = build_corpus()
    captions = [c for _, c in corpus]
    with open(os.path.join(OUT, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for kind, caption in corpus:
            f.write(json.dumps({"kind": kind, "text": caption}, ensure_ascii=False) + "\n")
    with open(os.path.join(OUT, "replaced_utf8.json"), "w") as f:
        json.dump([[b.hex(), b.decode("utf-8", "replace")] for b in INVALID_UTF8], f, ensure_ascii=True, indent=0)

    ids_l = windows_transformers(clip_l, captions, 49407)
    ids_g = windows_transformers(big_g, captions, 0)
    ids_oc = windows_open_clip(oc, captions)
    ftfy_changes = [ftfy.fix_text(c) != c for c in captions]
    tensors = {}
    for name, lists in [("transformers", ids_l), ("transformers_bigg", ids_g), ("open_clip", ids_oc)]:
        tensors[name + "_ids"], tensors[name + "_lengths"] = u16(lists)
    tensors["ftfy_changes"] = np.array(ftfy_changes, dtype=np.uint8)
    tensors["kind"] = np.array([KINDS.index(k) for k, _ in corpus], dtype=np.uint8)
    save_file(tensors, os.path.join(OUT, "expected.safetensors"), metadata={"kinds": ",".join(KINDS)})

    changed_cps, changed_offsets, changed_values, classes = code_point_sweep(clip_l)
    sweep = {"normalized_cps": np.array(changed_cps, dtype=np.int32),
             "normalized_offsets": np.array(changed_offsets, dtype=np.int32),
             "normalized_values": np.array(changed_values, dtype=np.int32)}
    for name, ranges in classes.items():
        sweep[name + "_ranges"] = np.array(ranges, dtype=np.int32).reshape(-1, 2)
    save_file(sweep, os.path.join(OUT, "unicode_sweep.safetensors"))

    with open(os.path.join(OUT, "html_unescape.json"), "w") as f:
        json.dump(html_cases(), f, ensure_ascii=True, indent=0)
    with open(os.path.join(OUT, "folder_cases.json"), "w") as f:
        json.dump(folder_cases(vocab, merges), f, ensure_ascii=False, indent=None, separators=(",", ":"))

    # Summary for the README.
    differ = [k for (k, _), a, b in zip(corpus, ids_l, ids_oc) if a != b]
    by_kind = {k: differ.count(k) for k in KINDS if differ.count(k)}
    print(f"{len(corpus)} captions; transformers vs open_clip differ on {len(differ)} "
          f"({100 * len(differ) / len(corpus):.1f}%): {by_kind}")
    print(f"ftfy changes {sum(ftfy_changes)} captions; differ where ftfy does not: "
          f"{sum(1 for a, b, f in zip(ids_l, ids_oc, ftfy_changes) if a != b and not f)}")
    print(f"transformers vs transformers_bigg content differs on {sum(1 for a, b in zip(ids_l, ids_g) if a != b)}")
    print(f"sweep: {len(changed_cps)} code points changed by the normalizer; ranges "
          + ", ".join(f"{k} {len(v)}" for k, v in classes.items()))
    # The peers' speed on one core (TOKENIZERS_PARALLELISM=false is set at the top): fresh tokenizers, two passes.
    for name, make, call in [
            ("transformers CLIPTokenizer", lambda: CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=CONTEXT),
             lambda t: t(captions, padding="max_length", max_length=CONTEXT, truncation=True)),
            ("open_clip SimpleTokenizer", lambda: open_clip.tokenizer.SimpleTokenizer(), lambda t: t(captions))]:
        tokenizer = make()
        for rep in ("cold", "warm"):
            start = time.perf_counter()
            call(tokenizer)
            print(f"{name}, {rep}: {len(captions) / (time.perf_counter() - start):.0f} captions/s")
    for name in sorted(os.listdir(OUT)):
        print(f"  {name}: {os.path.getsize(os.path.join(OUT, name))} bytes")


if __name__ == "__main__":
    sys.exit(main())
