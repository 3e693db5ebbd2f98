#!/usr/bin/env python3
"""Golden token ids for SmolLM2's tokenizer, from Hugging Face reference implementations.

Builds the tokenizer twice, independently of rz's code:
  1. with the `tokenizers` library from the vocabulary and merges stored in the GGUF file (read
     with the `gguf` package) and the pre-tokenizer of SmolLM2's real tokenizer.json:
     Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)],
     ByteLevel decoder, control tokens as special added tokens;
  2. with transformers' own GGUF loader (AutoTokenizer.from_pretrained(dir, gguf_file=...)).
Both must agree on every input (ids with and without special-token parsing, and the decoded
text), then tests/golden/smollm2_tokenizer_golden.json is written.

Run with the reference environment:
  /opt/refpy/bin/python tests/golden/make_tokenizer_golden.py [models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import json
import os
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(HERE, "smollm2_tokenizer_golden.json")

CORPUS = [
    "Hello world",
    " Hello world",
    "Hello, world! How are you doing today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say we've done it, DON'T they? She'd",
    "12345",
    "3.14159 and 1,000,000 and 2024-06-01",
    "x = 42; y = x * 3.5 + 0.001",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += v[i];\n}\n",
    "#include <stdio.h>\nint main() { printf(\"hi\\n\"); }",
    "    indented\n        more\n",
    "a  b   c    d     e",
    "   ",
    "\n",
    "\n\n\n",
    "line one\nline two\r\nline three\n\n",
    "\t\ttabs\tand spaces  \t ",
    "trailing spaces   ",
    "Café, naïve, résumé, Ångström, Straße",
    "Äpfel und Öl über alles",
    "日本語のテキストです。",
    "我想在apple工作1314151天～",
    "한국어 문장입니다",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙",
    "emoji at the end 😁",
    "👨‍👩‍👧‍👦 family",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|>",
    "<repo_name>rz<file_sep>main.cpp",
    "<|im_start",
    "a\u0085b",
    "x \u0085\u0085 y",
    "\u2003\u2003x",
    "a\u00a0\u00a0b",
    "a\u3000\u3000 b\u2028c",
    "non\u00a0breaking\u2003em space",
    "zero\u200bwidth",
    "''''''```````\"\"\"\"......!!!!!!??????",
    "------======= ...",
    "https://example.com/path?query=1&x=2#frag",
    "user@example.com",
    "Σίσυφος ΣΊΣΥΦΟΣ",
    "3 33 333 3333 33333",
    "Long text: " + " ".join("word%d, the value is %d.%d;" % (i, i * 37, i % 7) for i in range(60)),
    "",
]


def read_gguf_vocab(path):
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(key):
        f = r.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    types = ints("tokenizer.ggml.token_type")
    merges = strings("tokenizer.ggml.merges")
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    return tokens, types, merges, pre


def build_tokenizers_lib(tokens, types, merges):
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False)
                for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens(specials)
    return tok


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    tokens, types, merges, pre = read_gguf_vocab(model)
    assert pre == "smollm", pre
    lib = build_tokenizers_lib(tokens, types, merges)

    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(model)),
                                       gguf_file=os.path.basename(model))

    cases = []
    for text in CORPUS:
        lib.encode_special_tokens = False
        ids_special = lib.encode(text, add_special_tokens=False).ids
        lib.encode_special_tokens = True
        ids = lib.encode(text, add_special_tokens=False).ids
        lib.encode_special_tokens = False
        decoded = lib.decode(ids_special, skip_special_tokens=False)

        hf_special = hf(text, add_special_tokens=False)["input_ids"]
        hf_plain = hf(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        hf_decoded = hf.decode(hf_special, skip_special_tokens=False,
                               clean_up_tokenization_spaces=False)
        if hf_special != ids_special or hf_plain != ids or hf_decoded != decoded:
            sys.exit("reference implementations disagree on %r:\n tokenizers %s / %s / %r\n"
                     " transformers %s / %s / %r" % (text, ids_special, ids, decoded,
                                                     hf_special, hf_plain, hf_decoded))
        cases.append({"text": text, "ids": ids, "ids_special": ids_special, "decoded": decoded})

    out = {
        "model": "models/" + os.path.basename(model),
        "generator": "tests/golden/make_tokenizer_golden.py (tokenizers + transformers GGUF loader)",
        "note": "ids: add_special_tokens=False, special-token text encoded as plain text; "
                "ids_special: special-token text parsed; decoded: decode(ids_special)",
        "cases": cases,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %s (%d cases)" % (OUT, len(cases)))


if __name__ == "__main__":
    main()
