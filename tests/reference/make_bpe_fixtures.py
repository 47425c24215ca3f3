#!/usr/bin/env python3
"""Generates tests/data/bpe/: truncated but valid Qwen (byte-level BPE) and Mistral Tekken tokenizers that keep
the real ids, a deterministic corpus of adversarial captions, the ids the reference tokenizers give for each, and
the token ids and masks of the diffusion pipelines' prompt layouts (Z-Image, FLUX.2 klein, Qwen-Image, Qwen-Image
Edit, FLUX.2 dev). See tests/data/bpe/README.md for every file and tensor.

Made with (pip, CPU only): transformers 5.24.0 (tokenizers 0.23.3), mistral_common 1.13.1 (tiktoken 0.14.0),
safetensors, numpy 2.3.5, Jinja2 3.1.6, Pillow 13.0.0, Python 3.11.7. Run from the repository root:
    /tmp/refvenv/bin/pip install transformers mistral_common safetensors numpy jinja2 pillow
    /tmp/refvenv/bin/python tests/reference/make_bpe_fixtures.py --qwen QWEN_DIR [--qwen-image QWEN_IMAGE_DIR]
QWEN_DIR holds Qwen3's vocab.json, merges.txt and tokenizer_config.json (tdrussell/diffusion-pipe
configs/qwen3_06b/, 8f83dbf, verbatim copies of the Hugging Face Qwen/Qwen3 files); QWEN_IMAGE_DIR Qwen-Image's
tokenizer folder (diffusion-pipe configs/qwen_image/tokenizer/: the same vocab.json and merges.txt, md5 72dacf1d...,
and its own tokenizer_config.json / added_tokens.json). Tekken comes from the mistral_common wheel
(mistral_common/data/tekken_240911.json). A rerun writes byte-identical files (one seeded random.Random).

Truncation: the Qwen vocabulary is 256 byte symbols (ids 0..255) then one entry per merge (id 256 + rank; the
script asserts this), so its first N_MERGES merges and ids 0..255+N_MERGES are a valid tokenizer with the real
ids; the added tokens keep their ids 151643.. . Tekken keeps its first N_TEKKEN ranks (the 256 bytes first),
with default_vocab_size = N_TEKKEN + 1000 so that every kept rank is a token (id = rank + 1000). The references
are then run on these truncated files, so they and wick see the same vocabulary.

References:
  qwen3          Qwen2Tokenizer.from_pretrained(tests/data/bpe/qwen3) called as tokenizer(caption) (no BOS/EOS);
                 tokenizers.Tokenizer.from_file(qwen3_tokenizer.json) (written from it) must agree.
  qwen_image     the same with Qwen-Image's tokenizer_config.json (added tokens end at 151664, so "<think>" is text).
  tekken         mistral_common Tekkenizer.from_file(tekken.json).encode(caption, bos=False, eos=False): typed
                 special-token literals ("[INST]") are plain text.
  tekken_hf      transformers' convert_tekken_tokenizer(tekken.json)(caption, add_special_tokens=False), what
                 diffusers' FLUX.2 pipeline runs: typed special-token literals become their ids.
Prompt layouts (one call per prompt, as the pipelines do; the script asserts the padding and mask layout):
  zimage         apply_chat_template(user, add_generation_prompt, enable_thinking=True), then
                 tokenizer(text, padding="max_length", max_length=512, truncation=True): right pad 151643.
  klein          the same with enable_thinking=False ("<think>\\n\\n</think>\\n\\n" appended).
  qwenimage      diffusers QwenImagePipeline's template string .format(prompt), tokenizer(text, max_length=1024+34,
                 padding=True, truncation=True); the pipeline then drops the first 34 ids and keeps at most 512.
  qwenimage_edit QwenImageEditPipeline's template through Qwen2_5_VLProcessor(text, images=[112x112 image],
                 padding=True) (image and video processors with their defaults, the tokenizer above): its
                 "<|image_pad|>" becomes N_IMAGE_TOKENS = 16 ids (grid 8x8 / 4); not truncated; drops 64.
  qwenimage_edit_plus  QwenImageEditPlusPipeline: its template formatted with "Picture {i}: <|vision_start|>
                 <|image_pad|><|vision_end|>" for two images + the prompt, through the same processor with a 112x112
                 and a 112x56 (h x w) image: 16 and 8 image ids; drops 64.
  flux2          "<s>[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT][INST]{prompt without [IMG]}[/INST]" (FLUX.2 dev's chat
                 template rendering; checked against mistral_common's v7 instruct encoding with a system message),
                 then the converted Tekken tokenizer with padding="max_length", max_length=512, truncation=True,
                 padding_side="left": left pad 11.
"""
import argparse
import base64
import copy
import json
import os
import random
import shutil
import sys
import tempfile
import time
import unicodedata

from reference_common import single_threaded_tokenizers

single_threaded_tokenizers()
import numpy as np  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

N_MERGES = 6000
N_TEKKEN = 4000
N_CORPUS_SEED = 20261207
N_IMAGE_TOKENS = 16

QWEN_IMAGE_TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                       "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
                       "<|im_end|>\n<|im_start|>assistant\n")
QWEN_IMAGE_EDIT_TEMPLATE = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new "
    "image that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n"
    "<|im_start|>assistant\n")
QWEN_IMAGE_EDIT_PLUS_TEMPLATE = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new "
    "image that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")
FLUX2_SYSTEM = ("You are an AI that reasons about image descriptions. You give structured responses focusing on "
                "object relationships, object\nattribution and actions without speculation.")

# MODELS2.md section 4's checks (full vocabulary only).
FULL_CHECKS = [" 12345 ", "  two  spaces", "你好，世界", "a\n\nb", "x\r\ny", "don't", "emoji 😀!", "A cat"]

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                 "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                 "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                 "<tool_response>", "</tool_response>", "<think>", "</think>"]
TEKKEN_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                   "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                   "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
                   "<SPECIAL_20>", "<SPECIAL_999>"]


# ------------------------------------------------------------------------------------------------ corpus
def make_corpus(rng):
    subjects = ["a cat", "two dogs", "an old man", "a red car", "the city skyline", "a bowl of ramen", "a woman",
                "three birds", "a castle", "a robot", "a girl's bicycle", "the lighthouse", "a mountain lake"]
    actions = ["sitting on", "running through", "looking at", "next to", "under", "flying over", "made of"]
    places = ["a wooden table", "the beach at sunset", "a neon-lit street", "snowy mountains", "a field of flowers",
              "Tokyo at night", "an empty room", "the moon"]
    styles = ["photorealistic", "oil painting", "watercolor", "35mm film", "4k, highly detailed", "anime style",
              "cinematic lighting", "by Greg Rutkowski", "studio photo", "pixel art"]
    scripts = ["你好，世界", "一只猫坐在桌子上", "日本語のテキスト、カタカナとひらがな", "한국어 문장입니다", "Ελληνικά γράμματα",
               "Русский текст с буквами", "النص العربي", "עברית", "हिन्दी पाठ", "ภาษาไทย", "ქართული", "Հայերեն",
               "Tiếng Việt có dấu", "Ünïcödé àccénts", "straße ÆØÅ æøå", "𝐁𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐", "Ⅻ ⅷ ½ ¾ ² ³",
               "İstanbul ıi", "ΣΊΣΥΦΟΣ σίσυφος", "ﬁ ﬂ ligatures", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３", "𓀀𓀁 𒀀"]
    emoji = ["😀", "🐱", "👨‍👩‍👧‍👦", "🇯🇵", "👍🏽", "1️⃣", "❤️", "🏳️‍🌈", "✨✨", "🤖🎨"]
    combining = ["e\u0301", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "n\u0303o", "Z\u0351\u0352\u0353a\u0354lgo",
                 "\u0041\u0300\u0316", "o\u0308\u0304"]
    punctuation = ["((masterpiece))", "<lora:foo:0.8>", "[best quality]", "...", "!!!", "?!", "--", "«quoted»",
                   "“curly”", "‘single’", "a/b\\c", "#hashtag", "@user", "$100", "50%", "{braces}", "|pipe|",
                   "__init__", "x^2", "a+b=c", "🙂!", "、。", "，"]
    numbers = ["12345", "3.14159", "2026", "1,000,000", "٣٤٥", "१२३", "๑๒๓", "1st 2nd 3rd", "0x1F", "v1.2.3",
               "10:30", "99.9%", "²³", "①②③"]
    apostrophes = ["don't", "DON'T", "it's", "IT'S", "they're", "We'VE", "I'm", "you'll", "he'd", "'s", "'S",
                   "rock'n'roll", "o'clock", "’s curly", "'ſ", "'LL", "''", "' s", "can't've"]
    spaces = ["a\nb", "a\n\nb", "x\r\ny", "\r\n\r\n", "two  spaces", "   leading", "trailing   ", "\ttab\t",
              "a \n b", " \n", "line1\nline2\n", "\n", "a\u00a0b", "a\u3000b", "a\u2003b", "\u000b\u000c", "a \r b",
              "end\n\n\n", "x  \n  y", "\u0085", "a\u2028b"]
    controls = ["\u0000", "\u0001\u0002", "\u007f", "\u200b", "\u200d", "\ufeff", "\u00ad", "\u0300", "\ue000"]
    kinds = {}
    kinds["plain"] = []
    for _ in range(300):
        text = f"{rng.choice(subjects)} {rng.choice(actions)} {rng.choice(places)}, {rng.choice(styles)}"
        r = rng.random()
        if r < 0.15:
            text = text.upper()
        elif r < 0.3:
            text = text.title()
        kinds["plain"].append(text)
    pools = {"scripts": scripts, "emoji": emoji, "combining": combining, "punctuation": punctuation,
             "numbers": numbers, "apostrophes": apostrophes, "spaces": spaces, "controls": controls}
    for kind, pool in pools.items():
        kinds[kind] = list(pool)
        for _ in range(120):
            pieces = [rng.choice(pool) for _ in range(rng.randint(1, 4))]
            kinds[kind].append(rng.choice(["", " ", ", "]).join(pieces))
    special_literals = QWEN_SPECIALS + TEKKEN_SPECIALS
    kinds["special"] = list(special_literals) + ["<|im_start", "<|IM_END|>", "< think>", "[inst]", "<s >",
                                                 "<|im_start|><|im_end|>", "[INST][/INST]", "x<think>y", "<<s>>",
                                                 "<|endoftext|>!", " <|im_end|> ", "<s>[IMG]</s>", "[IMG][IMG]"]
    for _ in range(250):
        pieces = [rng.choice(special_literals + subjects + punctuation + spaces) for _ in range(rng.randint(2, 5))]
        kinds["special"].append(rng.choice(["", " ", "\n"]).join(pieces))
    kinds["empty"] = ["", " ", "  ", "\n", "\t", "\r\n", " \n ", "\u3000"]
    kinds["blocks"] = []
    for _ in range(250):
        start = rng.randrange(0, 0x30000, 256)
        assigned = [c for c in range(start, start + 256) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
        if not assigned:
            continue
        kinds["blocks"].append("".join(chr(rng.choice(assigned)) for _ in range(rng.randint(3, 12))))
    all_pieces = [p for pool in pools.values() for p in pool] + subjects + styles
    kinds["mixed"] = []
    for _ in range(300):
        base = kinds["plain"][rng.randrange(len(kinds["plain"]))]
        pieces = [base] + [rng.choice(all_pieces) for _ in range(rng.randint(1, 4))]
        rng.shuffle(pieces)
        kinds["mixed"].append(rng.choice(["", " ", ", ", "\n"]).join(pieces))
    kinds["long"] = []
    for n in [60, 120, 250, 400, 510, 520, 700, 1100]:
        kinds["long"].append(" ".join(rng.choice(all_pieces + subjects * 4) for _ in range(n)))
    corpus = []
    for kind in sorted(kinds):
        for text in kinds[kind]:
            corpus.append({"kind": kind, "text": text})
    return corpus


# ------------------------------------------------------------------------------------------------ truncation
def write_json(path, obj, indent=None):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent, separators=(",", ": ") if indent else (",", ":"))
        f.write("\n")


def truncate_qwen(src, dst, with_vocab):
    os.makedirs(dst, exist_ok=True)
    vocab = json.load(open(os.path.join(src, "vocab.json"), encoding="utf-8"))
    lines = open(os.path.join(src, "merges.txt"), encoding="utf-8").read().split("\n")
    assert lines[0].startswith("#version")
    merges = [line for line in lines[1:] if line]
    for rank, line in enumerate(merges):
        left, right = line.split(" ")
        assert vocab[left + right] == 256 + rank, (rank, line)
    if with_vocab:
        kept = {token: i for token, i in vocab.items() if i < 256 + N_MERGES}
        # The added tokens' real ids, in the vocabulary too: transformers gives an added token missing from
        # vocab.json the next free id (8256 here), whatever tokenizer_config.json says.
        config = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
        for id_text, entry in config["added_tokens_decoder"].items():
            kept[entry["content"]] = int(id_text)
        write_json(os.path.join(dst, "vocab.json"), dict(sorted(kept.items(), key=lambda kv: kv[1])))
        with open(os.path.join(dst, "merges.txt"), "w", encoding="utf-8") as f:
            f.write(lines[0] + "\n" + "\n".join(merges[:N_MERGES]) + "\n")
    for name in ["tokenizer_config.json", "added_tokens.json", "special_tokens_map.json"]:
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))


def truncate_tekken(src, dst):
    raw = json.load(open(src, encoding="utf-8"))
    out = {"config": dict(raw["config"]), "vocab": raw["vocab"][:N_TEKKEN]}
    for i, entry in enumerate(out["vocab"]):
        assert entry["rank"] == i
    out["config"]["num_vocab_tokens"] = N_TEKKEN
    out["config"]["default_vocab_size"] = N_TEKKEN + out["config"]["default_num_special_tokens"]
    out["config"]["version"] = "v7"  # the instruct format with [SYSTEM_PROMPT] (Mistral-Small-3.x)
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


# ------------------------------------------------------------------------------------------------ references
def qwen_tokenizer(folder):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(folder)


def tekken_references(path):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer
    return Tekkenizer.from_file(path), convert_tekken_tokenizer(path, chat_template="")


def pack(rows):
    ids = np.array([i for row in rows for i in row], dtype=np.int32)
    lengths = np.array([len(row) for row in rows], dtype=np.int32)
    return ids, lengths


def check_padded(ids, mask, pad_id, left):
    n = sum(mask)
    real = ids[len(ids) - n:] if left else ids[:n]
    pads = ids[:len(ids) - n] if left else ids[n:]
    expected_mask = [0] * (len(ids) - n) + [1] * n if left else [1] * n + [0] * (len(ids) - n)
    assert list(mask) == expected_mask and all(p == pad_id for p in pads), (ids, mask)
    return list(real)


def layouts(corpus, qwen3, qwen_image, tekken_hf, tekkenizer):
    # The prompts: every kind's first 12 captions, plus fixed cases.
    by_kind = {}
    for row in corpus:
        by_kind.setdefault(row["kind"], []).append(row["text"])
    prompts = ["A cat", "", "a photo of [IMG] a dog", "<|im_end|> typed", "</think> done"]
    for kind in sorted(by_kind):
        prompts += by_kind[kind][:6]
    prompts += [by_kind["long"][i] for i in (1, 4, 7)]  # 120, 510, 1100 pieces
    out = {"prompts": prompts}

    def qwen_chat(prompt, thinking):
        text = qwen3.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=thinking)
        enc = qwen3(text, padding="max_length", max_length=512, truncation=True)
        return check_padded(enc["input_ids"], enc["attention_mask"], 151643, left=False)

    out["zimage"] = [qwen_chat(p, True) for p in prompts]
    out["klein"] = [qwen_chat(p, False) for p in prompts]
    assert qwen3.apply_chat_template([{"role": "user", "content": "A cat"}], tokenize=False,
                                     add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")

    rows = []
    for p in prompts:
        enc = qwen_image(QWEN_IMAGE_TEMPLATE.format(p), max_length=1024 + 34, padding=True, truncation=True)
        assert all(m == 1 for m in enc["attention_mask"])
        rows.append(list(enc["input_ids"]))
    batch = qwen_image([QWEN_IMAGE_TEMPLATE.format(p) for p in prompts[:3]], max_length=1058, padding=True,
                       truncation=True)
    for i in range(3):
        assert check_padded(batch["input_ids"][i], batch["attention_mask"][i], 151643, left=False) == rows[i]
    out["qwenimage"] = rows

    # The edit pipeline's processor call, processor(text, images, padding=True), with a 112x112 image (Qwen2.5-VL
    # image processor defaults: grid 1x8x8, 8*8/4 = 16 <|image_pad|> ids).
    from PIL import Image
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor
    processor = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=qwen_image,
                                    video_processor=Qwen2VLVideoProcessor())
    image = Image.fromarray(np.zeros((112, 112, 3), dtype=np.uint8))
    # The edit layouts are not truncated: they skip the last (1,100-piece, 7,000-token) prompt to keep the file small.
    rows = []
    for p in prompts[:-1]:
        enc = processor(text=[QWEN_IMAGE_EDIT_TEMPLATE.format(p)], images=[image], padding=True)
        assert list(enc["image_grid_thw"][0]) == [1, 8, 8] and all(m == 1 for m in enc["attention_mask"][0])
        rows.append(list(enc["input_ids"][0]))
        text = QWEN_IMAGE_EDIT_TEMPLATE.format(p).replace("<|image_pad|>", "<|image_pad|>" * N_IMAGE_TOKENS, 1)
        assert rows[-1] == qwen_image(text)["input_ids"]  # the expansion the processor does
    out["qwenimage_edit"] = rows
    # Edit Plus: "Picture {i}: <|vision_start|><|image_pad|><|vision_end|>" per image before the prompt, the same
    # system prompt; two images, 112x112 (16 ids) and 112 high x 56 wide (grid 1x8x4: 8 ids).
    tall = Image.fromarray(np.zeros((112, 56, 3), dtype=np.uint8))
    pictures = "".join(f"Picture {i + 1}: <|vision_start|><|image_pad|><|vision_end|>" for i in range(2))
    rows = []
    for p in prompts[:-1]:
        enc = processor(text=[QWEN_IMAGE_EDIT_PLUS_TEMPLATE.format(pictures + p)], images=[image, tall], padding=True)
        assert [list(g) for g in enc["image_grid_thw"]] == [[1, 8, 8], [1, 8, 4]]
        rows.append(list(enc["input_ids"][0]))
    out["qwenimage_edit_plus"] = rows

    from mistral_common.protocol.instruct.messages import SystemMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    instruct = MistralTokenizer.from_file(tekkenizer.file_path)
    rows, n_checked = [], 0
    for p in prompts:
        clean = p.replace("[IMG]", "")
        text = "<s>[SYSTEM_PROMPT]" + FLUX2_SYSTEM + "[/SYSTEM_PROMPT][INST]" + clean + "[/INST]"
        enc = tekken_hf(text, padding="max_length", max_length=512, truncation=True, padding_side="left",
                        add_special_tokens=False)
        real = check_padded(enc["input_ids"], enc["attention_mask"], 11, left=True)
        rows.append(real)
        if len(real) < 512 and not any(s in clean for s in TEKKEN_SPECIALS) and clean.strip():
            request = ChatCompletionRequest(messages=[SystemMessage(content=FLUX2_SYSTEM), UserMessage(content=clean)])
            tokens = instruct.encode_chat_completion(request).tokens
            assert tokens == real, (p, tokens, real)
            n_checked += 1
    out["flux2"] = rows
    print(f"flux2 layout equal to mistral_common's v7 instruct encoding on {n_checked} prompts")
    return out


def full_checks(qwen_dir, tekken_path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(qwen_dir)
    result = {"qwen": {t: tok(t)["input_ids"] for t in FULL_CHECKS}}
    result["qwen"]["zimage:A cat"] = tok(tok.apply_chat_template([{"role": "user", "content": "A cat"}],
                                                                 tokenize=False, add_generation_prompt=True,
                                                                 enable_thinking=True))["input_ids"]
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    tekken = Tekkenizer.from_file(tekken_path)
    result["tekken"] = {t: tekken.encode(t, bos=False, eos=False) for t in FULL_CHECKS}
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--qwen", required=True, help="folder with Qwen3's vocab.json, merges.txt, tokenizer_config.json")
    parser.add_argument("--qwen-image", help="Qwen-Image's tokenizer folder (default: --qwen's files minus Qwen3's "
                        "extra added tokens are not derived; give it)")
    parser.add_argument("--out", default="tests/data/bpe")
    parser.add_argument("--full-expected", help="also write the full tokenizers' ids on the corpus to this JSON file "
                        "(not committed: BpeTokenizer.FullVocabularies reads $WICK_BPE_FULL_DIR/full_expected.json)")
    args = parser.parse_args()
    import mistral_common
    tekken_src = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240911.json")

    out = args.out
    os.makedirs(out, exist_ok=True)
    truncate_qwen(args.qwen, os.path.join(out, "qwen3"), with_vocab=True)
    truncate_qwen(args.qwen_image, os.path.join(out, "qwen_image"), with_vocab=False)
    truncate_tekken(tekken_src, os.path.join(out, "tekken.json"))

    with tempfile.TemporaryDirectory() as tmp:
        image_dir = os.path.join(tmp, "qwen_image")
        shutil.copytree(os.path.join(out, "qwen_image"), image_dir)
        for name in ["vocab.json", "merges.txt"]:
            shutil.copyfile(os.path.join(out, "qwen3", name), os.path.join(image_dir, name))
        qwen3 = qwen_tokenizer(os.path.join(out, "qwen3"))
        qwen_image = qwen_tokenizer(image_dir)
        tekkenizer, tekken_hf = tekken_references(os.path.join(out, "tekken.json"))
        with open(os.path.join(out, "qwen3_tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(json.loads(qwen3.backend_tokenizer.to_str()), ensure_ascii=False,
                               separators=(",", ":")) + "\n")
        from tokenizers import Tokenizer
        from_json = Tokenizer.from_file(os.path.join(out, "qwen3_tokenizer.json"))

        corpus = make_corpus(random.Random(N_CORPUS_SEED))
        with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
            for row in corpus:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")  # UTF-8; controls and line breaks escaped
        texts = [row["text"] for row in corpus]
        refs = {"qwen3": [qwen3(t)["input_ids"] for t in texts],
                "qwen_image": [qwen_image(t)["input_ids"] for t in texts],
                "tekken": [tekkenizer.encode(t, bos=False, eos=False) for t in texts],
                "tekken_hf": [tekken_hf(t, add_special_tokens=False)["input_ids"] for t in texts]}
        assert [from_json.encode(t, add_special_tokens=False).ids for t in texts] == refs["qwen3"]
        # qwen3 in full; tekken as U16 (ids < 65536 in the truncated vocabulary); qwen_image and tekken_hf only
        # on the captions where they differ from qwen3 / tekken (typed special-token literals).
        tensors = {}
        tensors["qwen3_ids"], tensors["qwen3_lengths"] = pack(refs["qwen3"])
        tensors["tekken_ids"], tensors["tekken_lengths"] = pack(refs["tekken"])
        assert tensors["tekken_ids"].max() < 65536
        tensors["tekken_ids"] = tensors["tekken_ids"].astype(np.uint16)
        for name, base in [("qwen_image", "qwen3"), ("tekken_hf", "tekken")]:
            rows = [i for i, (a, b) in enumerate(zip(refs[name], refs[base])) if a != b]
            tensors[name + "_rows"] = np.array(rows, dtype=np.int32)
            tensors[name + "_ids"], tensors[name + "_lengths"] = pack([refs[name][i] for i in rows])
        kinds = sorted({row["kind"] for row in corpus})
        tensors["kind"] = np.array([kinds.index(row["kind"]) for row in corpus], dtype=np.uint8)
        save_file(dict(sorted(tensors.items())), os.path.join(out, "expected.safetensors"),
                  metadata={"kinds": ",".join(kinds)})
        for name, encode in [("transformers Qwen2Tokenizer", lambda t: qwen3(t)["input_ids"]),
                             ("mistral_common Tekkenizer", lambda t: tekkenizer.encode(t, bos=False, eos=False))]:
            start = time.perf_counter()
            for t in texts:
                encode(t)
            print(f"speed, one thread, warm: {name} {len(texts) / (time.perf_counter() - start):.0f} captions/s")
        differ = sum(a != b for a, b in zip(refs["tekken"], refs["tekken_hf"]))
        print(f"{len(texts)} captions; tekken vs tekken_hf differ on {differ} (typed special literals)")

        lay = layouts(corpus, qwen3, qwen_image, tekken_hf, tekkenizer)
        prompts = lay.pop("prompts")
        with open(os.path.join(out, "prompts.json"), "w", encoding="utf-8") as f:
            json.dump(prompts, f, ensure_ascii=False)
            f.write("\n")
        tensors = {}
        for name, rows in lay.items():
            tensors[name + "_ids"], tensors[name + "_lengths"] = pack(rows)
        save_file(dict(sorted(tensors.items())), os.path.join(out, "prompt_layouts.safetensors"),
                  metadata={"n_image_tokens": str(N_IMAGE_TOKENS)})

    if args.full_expected:
        # The full tokenizers' ids on the corpus, and the layouts with them (Tekken as a v7 copy in a temporary
        # folder, as the truncated file, so that mistral_common's system-prompt encoding applies).
        from transformers import AutoTokenizer
        texts = [row["text"] for row in corpus]
        qwen_full, image_full = AutoTokenizer.from_pretrained(args.qwen), AutoTokenizer.from_pretrained(args.qwen_image)
        with tempfile.TemporaryDirectory() as tmp:
            raw = json.load(open(tekken_src, encoding="utf-8"))
            raw["config"]["version"] = "v7"
            with open(os.path.join(tmp, "tekken.json"), "w", encoding="utf-8") as f:
                json.dump(raw, f)
            tekkenizer_full, tekken_hf_full = tekken_references(os.path.join(tmp, "tekken.json"))
            full = {"qwen3": [qwen_full(t)["input_ids"] for t in texts],
                    "qwen_image": [image_full(t)["input_ids"] for t in texts],
                    "tekken": [tekkenizer_full.encode(t, bos=False, eos=False) for t in texts],
                    "layouts": layouts(corpus, qwen_full, image_full, tekken_hf_full, tekkenizer_full)}
        write_json(args.full_expected, full)
    checks = full_checks(args.qwen, tekken_src)
    write_json(os.path.join(out, "full_vocab_checks.json"), checks, indent=1)
    for family, table in checks.items():
        for text, ids in table.items():
            print(f"full {family}: {text!r} -> {ids}")
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) if os.path.isdir(path) else \
            os.path.getsize(path)
        print(f"{name}: {size} bytes")


if __name__ == "__main__":
    sys.exit(main())
