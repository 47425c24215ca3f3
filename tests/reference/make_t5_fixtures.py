#!/usr/bin/env python3
"""Generates tests/data/t5/: a tiny trained T5-style SentencePiece model with a caption corpus and the ids the
reference tokenizers give for it, and a tiny random T5 v1.1 encoder (transformers' T5EncoderModel) in
transformers' sharded layout and as a ComfyUI-style single file, with its outputs on padded caption batches.
See tests/data/t5/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0 (+cu132 wheel), transformers 5.24.0, tokenizers 0.23.3, sentencepiece
0.2.3, protobuf 7.36.2 (transformers needs it to read spiece.model), safetensors 0.8.0, Python 3. Run from the
repository root:
    /tmp/venv/bin/pip install torch transformers sentencepiece protobuf safetensors
    /tmp/venv/bin/python tests/reference/make_t5_fixtures.py
Deterministic: the captions come from random.Random(seeds below), SentencePiece trains on one thread, torch runs
one thread with torch.use_deterministic_algorithms(True) and a seeded generator; a rerun rewrites byte-identical
files (safetensors metadata keys sorted).

Tokenizer. SentencePieceTrainer.train(model_type="unigram", vocab_size=1000, pad_id=0, eos_id=1, unk_id=2,
bos_id=-1, character_coverage=0.9995, num_threads=1) on TRAIN_CAPTIONS (generated English captions plus some
Unicode ones; not committed, regenerated here): the T5 layout (pad <pad> 0, EOS </s> 1, unk <unk> 2, no BOS,
nmt_nfkc normalisation, dummy prefix, extra whitespace removed), with 1000 pieces instead of 32000. Rare
characters (most CJK, emoji) are not pieces, so they become <unk> (2), as in the real model for characters
outside its coverage.

Reference ids. `ids[i]` = transformers' T5Tokenizer(caption).input_ids without the final EOS 1: transformers 5 has
only the fast (Rust tokenizers) T5Tokenizer, built here from spiece.model by T5Tokenizer.from_pretrained
(extra_ids=100: <extra_id_k> = 1000 + 99 - k), the tokenizer diffusers' Flux and SD3 pipelines run. The T5 layout
(ids + [1], truncated to max_length by keeping the first max_length - 1 pieces then 1, padded with 0) is checked
here against T5Tokenizer(padding="max_length", truncation=True, max_length=L) for L = 77 and 256 on every caption.
For information, `spm_differs` holds sentencepiece.SentencePieceProcessor(spiece.model).encode(caption) (0.2.3)
where it differs from `ids`, and `normaliser_differs` the captions whose words differ between transformers'
normaliser + pre-tokenizer and sentencepiece's normaliser split at U+2581 and white space (wick's rule): there wick
cannot match transformers (NFD Hangul / kana, combining stacks; docs/text_encoders.md).

Encoder. T5Config(vocab_size=1128, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
is_encoder_decoder=False, tie_word_embeddings=False, dropout_rate=0) in T5EncoderModel, torch.manual_seed(0).
1128 = the tokenizer's 1000 pieces + 100 extra ids + 28 rows of padding, the same structure as T5-XXL's 32128 =
32000 + 100 + 28 (the sizes come from the weights, not from the tokenizer). After construction every weight is
redrawn (seeded generator) so that each matters and outputs stay O(1): Linear weights N(0, (1/sqrt(fan_in))^2),
the embedding N(0, 1), the relative attention bias N(0, 1), every T5LayerNorm weight 1 + 0.2 N(0, 1).
Saved with save_pretrained(max_shard_size="100KB") (transformers names, f32, `shared.weight` only: the tied
`encoder.embed_tokens.weight` is not written) and as one ComfyUI-style file (`t5xxl_comfy.safetensors`: the same
state dict, f32, no prefix, like ComfyUI's t5xxl_fp16.safetensors but in f32 so that f32 parity is exact).

Encoder cases (inputs are tokenizer outputs of corpus captions, the layout above):
  short: 3 captions padded/truncated to 77 tokens, one of them empty (only EOS);
  long: 2 captions at 160 tokens, the first longer than 159 pieces (truncated), so relative distances reach 159
        (> max_distance 128: the logarithmic buckets and the clamp at bucket 15 / 31 are exercised).
Each has outputs with the attention mask and without it (mask=None: padding attended to, as Flux and SD3 use it),
in f32 (the model as built) and in bf16 (stored as bf16; T5EncoderModel.from_pretrained(folder, dtype=torch.bfloat16), what
diffusers loads: transformers 5 keeps T5's `wo` in f32 (_keep_in_fp32_modules) only for float16, so in bf16 every
weight, the residual stream and the output are bf16; T5LayerNorm squares and averages in f32). `relative_buckets` holds transformers' bidirectional bucket of every relative
position -300..300 (32 buckets, max distance 128).

`not_t5_ids.model`: a 100-piece model with sentencepiece's default ids (unk 0, BOS 1, EOS 2, no pad), identity
normalisation; wick must refuse it as a T5 tokenizer.

Measured (this script's last run; errors are max|a - b| / max|b|):
  corpus: 3,293 captions (1,015 in the style of real prompts: ISSUE_*), 405 with <unk>, 142 truncated at 77 tokens
    and 30 at 256, up to 786 pieces.
  sentencepiece 0.2.3 differs from transformers on 35 captions: 16 with typed special tokens (transformers maps
    </s>, <pad>, <unk>, <extra_id_N> to their ids; sentencepiece splits them as text; a fullwidth "＜/s＞" is
    normalised to "</s>", which transformers' segmentation matches as the control piece), 2 with \x85 (NEL, which
    sentencepiece's map leaves and transformers splits words at), a run of 100 "!" (an equal-score
    tie decided by float rounding: sentencepiece sums in float over the text, transformers in double per word), and
    16 of the 17 `normaliser_differs`: decomposed (NFD) Hangul syllables or kana with voicing marks that this model
    has as whole pieces (sentencepiece's nmt_nfkc map recomposes them; transformers' Precompiled normaliser maps
    whole grapheme clusters under 6 bytes, else character by character, leaving the jamo / marks apart) and
    combining marks on a stack, a fullwidth letter or a ligature. Debian's libsentencepiece 0.1.97 breaks more ties
    otherwise (tests/models/t5_tokenizer_test.cpp).
  transformers' bf16 vs its f32 output (stored as `bf16_rel_err_vs_f32`): short 1.27e-2, short_nomask 2.00e-2,
    long 1.69e-2, long_nomask 1.91e-2.
"""
import io
import json
import os
import random
import re
import shutil
import unicodedata

import sentencepiece as spm
import torch
from safetensors.torch import load_file
from transformers import T5Config, T5EncoderModel, T5Tokenizer

from reference_common import print_file_sizes, require_repo_root
from reference_torch import deterministic_torch, rel_err_f32, save_sorted

OUT = "tests/data/t5"
VOCAB_SIZE = 1000
N_EXTRA_IDS = 100
MODEL_VOCAB = 1128
LENGTHS = (77, 256)

# ---------------------------------------------------------------------------------------------------------------
# Captions

SUBJECTS = ("cat dog fox owl horse dragon robot astronaut knight wizard woman man girl boy child baby family "
            "couple chef dancer soldier sailor farmer tiger lion elephant whale dolphin butterfly bird eagle "
            "castle house cottage tower bridge lighthouse car truck bicycle train ship boat airplane tree "
            "flower rose sunflower mountain river lake waterfall forest city street market cafe library "
            "kitchen bedroom garden beach desert island volcano galaxy planet moon sun cloud storm").split()
ADJECTIVES = ("red blue green yellow purple orange black white golden silver tiny huge ancient modern futuristic "
              "cozy dark bright misty snowy rainy sunny foggy glowing shiny rusty wooden glass marble fluffy "
              "happy sad angry calm old young beautiful ugly strange magical mysterious colorful pastel neon "
              "vintage minimalist detailed intricate soft sharp blurry").split()
PLACES = ("in a forest", "on a beach", "at night", "at sunset", "under the stars", "in the rain", "on the moon",
          "in a busy street", "next to a river", "inside a cathedral", "on top of a mountain", "in the snow",
          "in a field of flowers", "under water", "in a cyberpunk city", "in a small village", "in space",
          "by the window", "on a wooden table", "in front of a castle")
STYLES = ("oil painting", "watercolor", "digital art", "photograph", "35mm film", "pencil sketch", "anime style",
          "3d render", "unreal engine", "studio lighting", "bokeh", "high resolution", "8k", "cinematic",
          "trending on artstation", "by greg rutkowski", "isometric", "low poly", "pixel art", "macro shot",
          "wide angle", "portrait", "black and white", "hdr", "concept art")
VERBS = ("sitting", "standing", "running", "flying", "sleeping", "reading a book", "eating an apple",
         "playing guitar", "looking at the camera", "holding an umbrella", "wearing a hat", "dancing",
         "swimming", "smiling", "jumping", "walking", "drinking coffee", "painting a picture")
NUMBERS = ("1", "2", "3", "10", "42", "100", "1024", "2048", "3.14", "0.5", "1,000", "1,000,000", "2nd", "3rd",
           "21st", "1990s", "2024", "12:30", "50%", "$9.99", "#1", "4k", "16:9", "1920x1080", "-5", "+7", "1e-6",
           "007", "3/4", "98.6°F")
UNICODE_WORDS = ("Привет", "мир", "кошка", "Москва", "γάτα", "Ελλάδα", "φως", "日本", "東京", "猫", "写真",
                 "北京", "你好", "こんにちは", "ありがとう", "カタカナ", "한국어", "고양이", "서울", "مرحبا", "القطة",
                 "שלום", "חתול", "नमस्ते", "बिल्ली", "สวัสดี", "แมว", "გამარჯობა", "Բարեւ", "ሰላም", "café", "naïve",
                 "résumé", "Zürich", "São Paulo", "Ærøskøbing", "Łódź", "İstanbul", "straße", "Øresund",
                 "crème brûlée", "piñata", "façade", "jalapeño", "Ångström", "smörgåsbord", "Dvořák", "Việt Nam")
EMOJI = ("😀", "😂", "🥲", "❤️", "❤", "👍", "👍🏽", "👩🏿‍🚀", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "🐱", "🐉",
         "🌅", "🔥", "✨", "🎨", "📷", "1️⃣", "#️⃣", "☕", "🍕", "🤖", "🦄", "🌍", "🚀", "⭐", "™", "©", "®")
PUNCTUATION = (",", ".", "!", "?", ";", ":", "...", "…", "—", "–", "-", "(", ")", "[", "]", "{", "}", "\"", "'",
               "“", "”", "‘", "’", "«", "»", "/", "\\", "|", "&", "*", "@", "#", "%", "^", "~", "`", "+", "=",
               "<", ">", "!!!", "?!", "¿", "¡", "§", "¶", "•", "·", "°")

# Captions chosen to break tokenizers: whitespace and control characters, NFKC-sensitive forms, combining marks,
# special-token text, scripts outside the model's coverage, empty and very long strings.
ADVERSARIAL = [
    "", " ", "  ", "\t", "\n", "\r\n", " \t \n ", "a", "A", ".", "</s>", "<pad>", "<unk>", "<s>", "<extra_id_0>",
    "<extra_id_99>", "a photo </s> of a cat", "a photo of a cat</s>", "</s></s></s>", "<pad> cat <pad>",
    "cat<unk>dog", "<extra_id_0> a cat <extra_id_1>", "</s> leading end token", "trailing end token </s>",
    "a  photo   of    a     cat", "  leading spaces", "trailing spaces   ", "tab\tseparated\twords",
    "new\nline\nseparated", "carriage\rreturn", "form\ffeed", "vertical\vtab", "nbsp\u00a0between",
    "em\u2003space", "ideographic\u3000space", "zero\u200bwidth\u200bspace", "zero\u200cwidth\u200dnon-joiner",
    "next\u0085line", "line\u2028separator", "paragraph\u2029separator", "bom\ufeffinside", "\ufeffbom at start",
    "soft\u00adhyphen", "bell\x07char", "escape\x1b[31mred\x1b[0m", "delete\x7fchar", "null\x00byte", "\x01\x02\x03",
    "ＡＢＣ　ｆｕｌｌｗｉｄｔｈ　１２３", "ｶﾀｶﾅ half width", "ﬁ ﬂ ﬀ ﬃ ligatures", "x² y³ H₂O", "① ② ③ circled",
    "Ⅻ roman numeral", "㎏ ㎝ ㎡ squared units", "™ ℃ ℉ № ℡", "½ ¼ ¾ fractions", "µ micro vs μ mu", "Å angstrom",
    "e\u0301 combining acute", "cafe\u0301 decomposed", "café composed", "a\u0300\u0301\u0302\u0303\u0304 stack",
    "Z\u0351\u0352\u0357a\u0315\u0350l\u0360\u0361g\u0362o\u0363 text", "n\u0303 vs ñ", "\u0301 lone combining mark",
    "\u1100\u1161\u11a8 hangul jamo", "각 hangul syllable", "ａ\u0301 fullwidth plus accent",
    "Ω ohm vs Ω omega", "K kelvin", "ǅ titlecase digraph", "ﷺ arabic ligature", "ﬀ\u0301",
    "😀😀😀😀😀", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇯🇵🇺🇸🇫🇷", "👍🏻👍🏼👍🏽👍🏾👍🏿", "❤️ vs ❤", "1️⃣2️⃣3️⃣",
    "\ue000 private use", "\ufffd replacement char", "\uffff noncharacter", "\U0001d400\U0001d401 math bold",
    "𝓯𝓪𝓷𝓬𝔂 script", "ⓑⓤⓑⓑⓛⓔ", "🅰🅱", "\u200f rtl mark \u200e ltr mark", "مرحبا بالعالم hello", "שלום עולם",
    "日本語のテキストと English mixed", "中文字符测试", "한국어 텍스트", "ไทย", "Ελληνικά ΚΕΦΑΛΑΙΑ", "ς σ Σ",
    "İ ı I i dotted", "ß ẞ eszett", "ǆ Ǆ ǅ", "ﬆ", "ℌ ℑ ℜ", "Ⓐ", "⁰¹²³⁴⁵⁶⁷⁸⁹", "₀₁₂₃",
    "&amp; &lt;b&gt; &quot;html&quot; &#39;entities&#39; &amp;amp;", "<b>bold</b> <i>tags</i>", "<|endoftext|>",
    "https://example.com/path?query=1&x=y#frag", "user@example.com", "C:\\Users\\name\\file.png", "/usr/bin/env",
    "print('hello world')", "def f(x): return x**2", "{\"json\": [1, 2, 3]}", "#hashtag @mention $cashtag",
    "ALL CAPS CAPTION", "MiXeD cAsE cApTiOn", "snake_case_word", "camelCaseWord", "kebab-case-word",
    "3.14159265358979323846", "1234567890" * 3, "0000000000", "1e10 1E-10 0x1F 0b101", "−5 minus sign",
    "a" * 300, "ab " * 200, "!" * 100, "?!" * 50, "... ... ...", "—–-", "''\"\"``", "«»‹›„“",
    "a\u0000b\u0000c", "\u2060word joiner", "\u180e mongolian vowel separator", "\u2800 braille blank",
]

# Captions in the style of real prompts that reach equal-score ties in the Unigram segmentation ("0.000001",
# "www.", "mmm": paths made of the same pieces in another order), where sentencepiece builds disagree.
ISSUE_NUMBERS = ("0.000001", "0.0001", "0.00005", "1,024", "1,000,000", "3.14e-5", "1e-6", "2.5e-10", "1000000",
                 "100000000", "0000", "000000", "0.5", "1.25", "99.999", "10,000", "1/1000", "1:1", "16:9", "2:3",
                 "4096x4096", "v1.0.0")
ISSUE_URLS = ("www.example.com", "https://www.artstation.com/artwork/xyz123", "http://wwww.example.org/a/b", "www.",
              "https://civitai.com/models/4201?modelVersionId=130072", "@artist_name", "#digitalart",
              "user@mail.com", "https://i.imgur.com/AbCdEf.png", "ftp://files.example.net/~user/",
              "example.com/?q=cat&page=2")
ISSUE_WEIGHTS = ("(masterpiece:1.2)", "((best quality))", "(((ultra detailed)))", "[[word]]", "[blurry]", "{a|b}",
                 "{red|green|blue}", "(cat:0.8)", "[dog:cat:0.5]", "<lora:detail_tweaker:0.7>",
                 "(worst quality:1.4)", "BREAK", "score_9, score_8_up, score_7_up", "1girl, solo", "\\(artist\\)",
                 "masterpiece,best quality,")
ISSUE_REPEATS = ("!!!!!", "??", "...", "----", "____", "====", "~~~", "****", "lol", "hahaha", "wwww", "aaaa", "mmm",
                 "zzz", "ooo", "eee", "sss", "lll", "111", "2222", "0000")
ISSUE_EXPLICIT = ["0.000001", "www.", "www.example.com", "1,024", "3.14e-5", "(masterpiece:1.2)", "[[word]]", "{a|b}",
                  "a cat, 0.000001 mmm www. 1,024 3.14e-5 (masterpiece:1.2) [[word]] {a|b} 🐱 猫 写真 東京",
                  "a photo of a cat </s> 0.000001", "<extra_id_0>www.<extra_id_1>", "＜/s＞ fullwidth end token",
                  "a\u2581b \u2581\u2581word", "\u2581", "tab\x85nel \u1680 \u2028 \u205f spaces"]


def plain_caption(rng):
    parts = [rng.choice(("a", "an", "the", "two", "three", "some", "A", "The"))]
    for _ in range(rng.randint(0, 2)):
        parts.append(rng.choice(ADJECTIVES))
    parts.append(rng.choice(SUBJECTS))
    if rng.random() < 0.6:
        parts.append(rng.choice(VERBS))
    if rng.random() < 0.7:
        parts.append(rng.choice(PLACES))
    text = " ".join(parts)
    for _ in range(rng.randint(0, 4)):
        text += ", " + rng.choice(STYLES)
    if rng.random() < 0.3:
        text = text[0].upper() + text[1:]
    if rng.random() < 0.3:
        text += rng.choice((".", "!", "", " ."))
    return text


def spiced_caption(rng):
    """A plain caption with numbers, punctuation, Unicode words and emoji mixed in."""
    words = plain_caption(rng).split(" ")
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        if kind < 0.25:
            token = rng.choice(NUMBERS)
        elif kind < 0.5:
            token = rng.choice(PUNCTUATION)
        elif kind < 0.8:
            token = rng.choice(UNICODE_WORDS)
        else:
            token = rng.choice(EMOJI)
        at = rng.randint(0, len(words))
        glue = rng.random() < 0.3  # attach without a space
        if glue and at > 0:
            words[at - 1] = words[at - 1] + token
        else:
            words.insert(at, token)
    text = " ".join(words)
    form = rng.random()
    if form < 0.1:
        text = unicodedata.normalize("NFD", text)
    elif form < 0.15:
        text = text.upper()
    return text


def long_caption(rng, n_sentences):
    return " ".join(spiced_caption(rng) + "." for _ in range(n_sentences))


def issue_caption(rng):
    """A plain caption with numbers, URLs, prompt-weight syntax, repeated letters, emoji and CJK mixed in."""
    words = plain_caption(rng).split(" ")
    for _ in range(rng.randint(1, 5)):
        kind = rng.random()
        pool = (ISSUE_NUMBERS if kind < 0.35 else ISSUE_URLS if kind < 0.55 else ISSUE_WEIGHTS if kind < 0.8 else
                ISSUE_REPEATS if kind < 0.9 else EMOJI + UNICODE_WORDS)
        token = rng.choice(pool)
        at = rng.randint(0, len(words))
        if rng.random() < 0.3 and at > 0:
            words[at - 1] += token
        else:
            words.insert(at, token)
    return " ".join(words)


def train_captions():
    rng = random.Random(1)
    out = [plain_caption(rng) for _ in range(6000)]
    out += [spiced_caption(rng) for _ in range(3000)]
    out += list(UNICODE_WORDS) * 3
    return out


def test_captions():
    """The committed corpus: 1,400 plain, 700 spiced, the adversarial list, 40 long captions (2 to 40 sentences),
    the explicit issue-style strings and 1,000 issue-style captions."""
    rng = random.Random(2)
    out = [plain_caption(rng) for _ in range(1400)]
    out += [spiced_caption(rng) for _ in range(700)]
    out += ADVERSARIAL
    out += [long_caption(rng, rng.randint(2, 40)) for _ in range(40)]
    out += ISSUE_EXPLICIT
    issue_rng = random.Random(3)
    out += [issue_caption(issue_rng) for _ in range(1000)]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer


def train_spiece(path):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train_captions()), model_writer=model, model_type="unigram",
        vocab_size=VOCAB_SIZE, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=0.9995,
        num_threads=1, minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())


def train_other_ids(path):
    """A valid SentencePiece model with sentencepiece's default ids (unk 0, BOS 1, EOS 2, no pad), which wick must
    refuse as a T5 tokenizer; identity normalisation keeps the file small."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train_captions()[:500]), model_writer=model, model_type="unigram", vocab_size=100,
        normalization_rule_name="identity", num_threads=1, minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_file=path)
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)


def t5_layout(pieces, max_length):
    """T5's sequence layout: pieces + EOS, truncated to the first max_length - 1 pieces + EOS, padded with 0."""
    ids = list(pieces[: max_length - 1]) + [1]
    return ids + [0] * (max_length - len(ids)), [1] * len(ids) + [0] * (max_length - len(ids))


# Unicode's White_Space property (what tokenizers' WhitespaceSplit splits at; str.isspace is another set).
WHITE_SPACE = set(map(chr, [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
                            0x202F, 0x205F, 0x3000]))


def hf_words(hf, text):
    """The words transformers' Unigram model sees: its normaliser, then its pre-tokenizer."""
    backend = hf.backend_tokenizer
    return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))]


def spm_words(sp, text):
    """wick's words: sentencepiece's normalised text split before every \u2581 and at white space (dropped), each
    word starting with \u2581."""
    words, word = [], ""
    for c in sp.normalize(text):
        if c == "\u2581" or c in WHITE_SPACE:
            words.append(word)
            word = c if c == "\u2581" else ""
        else:
            word += c
    words.append(word)
    return [w if w.startswith("\u2581") else "\u2581" + w for w in words if w]


def make_tokenizer_cases(model_path):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    assert sp.get_piece_size() == VOCAB_SIZE
    assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
    folder = os.path.join(OUT, "_hf_tokenizer_tmp")
    os.makedirs(folder, exist_ok=True)
    shutil.copy(model_path, os.path.join(folder, "spiece.model"))
    hf = T5Tokenizer.from_pretrained(folder)
    shutil.rmtree(folder)
    assert len(hf) == VOCAB_SIZE + N_EXTRA_IDS
    assert hf.convert_tokens_to_ids("<extra_id_0>") == VOCAB_SIZE + N_EXTRA_IDS - 1
    assert hf.convert_tokens_to_ids("<extra_id_99>") == VOCAB_SIZE

    captions = test_captions()
    special = re.compile("|".join(re.escape(t.content) for t in sorted(
        hf.added_tokens_decoder.values(), key=lambda t: len(t.content), reverse=True)))
    ids, spm_differs, normaliser_differs, n_unk = [], {}, [], 0
    n_truncated = {L: 0 for L in LENGTHS}
    for index, caption in enumerate(captions):
        hf_ids = hf(caption).input_ids
        assert hf_ids[-1] == 1, index
        ids.append(hf_ids[:-1])
        n_unk += 2 in hf_ids
        pieces = sp.encode(caption)
        if pieces != ids[-1]:
            spm_differs[str(index)] = pieces
        if any(hf_words(hf, part) != spm_words(sp, part) for part in special.split(caption)):
            normaliser_differs.append(index)
        for L in LENGTHS:
            # The layout rule is what transformers does with its own ids.
            hf_padded = hf(caption, padding="max_length", truncation=True, max_length=L)
            assert (hf_padded.input_ids, hf_padded.attention_mask) == t5_layout(hf_ids[:-1], L), (index, L)
            n_truncated[L] += len(hf_ids) > L
    stats = {"captions": len(captions), "with_unk": n_unk, "spm_differs": len(spm_differs),
             "normaliser_differs": len(normaliser_differs),
             "truncated_at": {str(L): n for L, n in n_truncated.items()},
             "max_pieces": max(len(p) for p in ids)}
    cases = {
        "about": "tests/reference/make_t5_fixtures.py: ids = transformers 5.24.0 T5Tokenizer (fast, tokenizers "
                 "0.23.3) input_ids of caption without the final EOS, with tests/data/t5/spiece.model; spm_differs "
                 "= sentencepiece 0.2.3 encode(caption) where it differs from ids; normaliser_differs = captions "
                 "whose words after transformers' normaliser and pre-tokenizer differ from those of "
                 "sentencepiece's normaliser split at \u2581 and white space",
        "stats": stats,
        "captions": captions,
        "ids": ids,
        "spm_differs": spm_differs,
        "normaliser_differs": normaliser_differs,
    }
    with open(os.path.join(OUT, "tokenizer_cases.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print("tokenizer:", stats)
    return sp, captions


# ---------------------------------------------------------------------------------------------------------------
# Encoder


def make_model():
    config = T5Config(vocab_size=MODEL_VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      feed_forward_proj="gated-gelu", is_encoder_decoder=False, tie_word_embeddings=False,
                      dropout_rate=0.0, use_cache=False)
    torch.manual_seed(0)
    model = T5EncoderModel(config).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=generator))
            elif name in ("shared.weight",) or name.endswith("relative_attention_bias.weight"):
                p.copy_(torch.randn(p.shape, generator=generator))
            else:
                p.copy_(torch.randn(p.shape, generator=generator) / p.shape[1] ** 0.5)
    return model


def batch(sp, captions, max_length):
    ids, mask = zip(*(t5_layout(sp.encode(c), max_length) for c in captions))
    return torch.tensor(ids, dtype=torch.int64), torch.tensor(mask, dtype=torch.int64)


def make_encoder_cases(sp, captions):
    model = make_model()
    folder = os.path.join(OUT, "pipeline", "text_encoder_3")
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder, max_shard_size="100KB")
    state = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            state.update(load_file(os.path.join(folder, name)))
    assert "shared.weight" in state and "encoder.embed_tokens.weight" not in state, sorted(state)[:5]
    assert torch.equal(state["shared.weight"], model.shared.weight)
    save_sorted(state, os.path.join(OUT, "t5xxl_comfy.safetensors"), {"format": "pt"})

    bf16 = T5EncoderModel.from_pretrained(folder, dtype=torch.bfloat16).eval()
    # transformers 5 applies T5's _keep_in_fp32_modules (wo) only for float16: in bf16 everything is bf16.
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())

    # short: a plain caption, an adversarial one and the empty caption; long: a long caption (> 255 pieces) and
    # a spiced one.
    long_index = max(range(len(captions)), key=lambda i: len(sp.encode(captions[i])))
    cases = {"short": ([captions[0], captions[1400], ""], 77), "long": ([captions[long_index], captions[1401]], 160)}
    tensors, errors = {}, {}
    for case, (texts, max_length) in cases.items():
        ids, mask = batch(sp, texts, max_length)
        tensors[f"{case}.ids"], tensors[f"{case}.mask"] = ids, mask
        for suffix, m in (("", mask), ("_nomask", None)):
            with torch.no_grad():
                out = model(input_ids=ids, attention_mask=m).last_hidden_state
                out_bf16 = bf16(input_ids=ids, attention_mask=m).last_hidden_state
            assert out_bf16.dtype == torch.bfloat16
            tensors[f"{case}.output{suffix}"] = out
            tensors[f"{case}.output{suffix}_bf16"] = out_bf16
            errors[f"{case}{suffix}"] = rel_err_f32(out_bf16, out)
    assert len(sp.encode(captions[long_index])) > 160
    positions = torch.arange(-300, 301)
    tensors["relative_buckets"] = model.encoder.block[0].layer[0].SelfAttention._relative_position_bucket(
        positions, bidirectional=True, num_buckets=32, max_distance=128)
    save_sorted(tensors, os.path.join(OUT, "encoder_case.safetensors"),
                {"bf16_rel_err_vs_f32": json.dumps(errors, sort_keys=True), "captions": json.dumps(
                    {k: v[0] for k, v in cases.items()}, ensure_ascii=True)})
    print("bf16 (transformers) vs f32, max|a-b|/max|b|:", errors)


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)
    model_path = os.path.join(OUT, "spiece.model")
    train_spiece(model_path)
    train_other_ids(os.path.join(OUT, "not_t5_ids.model"))
    sp, captions = make_tokenizer_cases(model_path)
    make_encoder_cases(sp, captions)
    print_file_sizes(OUT)


if __name__ == "__main__":
    main()
