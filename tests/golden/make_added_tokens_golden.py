#!/usr/bin/env python3
"""Golden token ids for added tokens matched in ordinary text, from Hugging Face `tokenizers`.

Added tokens with "special": false (user-defined tokens in GGUF: `<think>` in Qwen3, runs of
spaces in GPT-NeoX) are cut out of any text; "special": true ones (control tokens) only when
special-token parsing is on. Each vocabulary below is a real one from ../shared/testdata/vocab
with such tokens added; the Hugging Face tokenizer is rebuilt from the GGUF file (read with the
`gguf` package), independently of rz's code:
  - byte-level BPE (gpt-2): BPE(vocab, merges), ByteLevel pre-tokenizer and decoder;
  - SentencePiece BPE (llama-spm, phi-3): BPE(vocab, merges made from the scores as transformers'
    SentencePieceExtractor does), byte fallback, normalizer Prepend("▁") + Replace(" ", "▁"),
    decoder Replace/ByteFallback/Fuse/Strip: the tokenizer.json layout of Llama 2 and Phi-3.
Each rebuilt tokenizer is first checked against the vocabulary's own test vectors (X.gguf.inp /
.out); a mismatch stops the script.

The C++ test (tests/tokenizer/tokenizer_added_test.cpp) builds the same vocabularies: a GGUF file
(the base file's tokenizer keys plus the added tokens, user-defined = token type 4, control = 3)
and, for byte-level BPE, a tokenizer.json. GGUF has no lstrip/rstrip flags, so vocabularies that
use them are checked through tokenizer.json only ("loaders"); phi-3 is the shared file itself,
whose lstrip/rstrip flags llama.cpp (and rz) restore from the model name: rstrip on every added
token except <unk>, <s> and <|endoftext|>, as in Phi-3's tokenizer.json ("</s>" is a
user-defined token there).

ids: encode(text, add_special_tokens=False) with encode_special_tokens=True (control tokens'
text stays text, user-defined tokens are still cut out); ids_special: the same with control
tokens parsed; decoded: decode(ids).

Run with a Python that has `tokenizers` and `gguf` (pip install tokenizers gguf):
  python tests/golden/make_added_tokens_golden.py
"""
import json
import os
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VOCAB_DIR = os.path.join(os.path.dirname(ROOT), "shared", "testdata", "vocab")
OUT = os.path.join(HERE, "added_tokens_golden.json")

USER, CONTROL, UNKNOWN = 4, 3, 2  # GGUF token types


def added(content, special=False, lstrip=False, rstrip=False, normalized=False):
    return {"content": content, "special": special, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized}


VOCABS = [
    {
        # Qwen3-style reasoning tags and GPT-NeoX-style runs of spaces as user-defined tokens,
        # one added control token.
        "name": "gpt2-user",
        "base": "ggml-vocab-gpt-2.gguf",
        "loaders": ["gguf", "tokenizer.json"],
        "added": [added("<think>"), added("</think>"), added("  ", normalized=True),
                  added("    ", normalized=True), added("        ", normalized=True),
                  added("<|tool|>", special=True)],
        "texts": [
            "<think>\nI should answer.\n</think>\n\nThe answer is 42.",
            "before<think>inside</think>after",
            "a <think> b </think> c",
            "<think></think>",
            "</think><think>",
            "<think",
            "think>",
            "def f():\n    return 1\n",
            "x          y",
            "a b  c   d    e     f      g       h        i",
            "   ",
            "\t\t  \t",
            "line\n        indented by eight\n",
            "<|tool|>call<think>x</think>",
            "a <|tool|> b",
            "<|endoftext|> and <think>",
            "日本 <think>語</think>",
            "Hello world",
            "",
        ],
    },
    {
        # lstrip/rstrip of tokenizer.json added tokens (GGUF cannot express them).
        "name": "gpt2-strip",
        "base": "ggml-vocab-gpt-2.gguf",
        "loaders": ["tokenizer.json"],
        "added": [added("<mask>", lstrip=True), added("<sep>", rstrip=True),
                  added("<both>", lstrip=True, rstrip=True),
                  added("<|ctl|>", special=True, rstrip=True)],
        "texts": [
            "a <mask> b",
            "a\t \n<mask>",
            "<mask><mask>",
            "x<sep>   y",
            " <sep> ",
            "  <both>  z",
            "q <both>\n\n<both> r",
            "<|ctl|>  after",
            "a <|ctl|> b <mask> c <sep> d",
            "no added tokens here",
        ],
    },
    {
        # SentencePiece: the text after an added token gets the "▁" prefix again.
        "name": "llama-spm-user",
        "base": "ggml-vocab-llama-spm.gguf",
        "loaders": ["gguf"],
        "added": [added("<think>"), added("</think>"), added("<|tool|>", special=True)],
        "texts": [
            "<think>hi</think> there",
            "Hello <think>",
            " <think> ",
            "<think>\n",
            "a<think>b</think>c",
            "<think><think>",
            "<s>x</s> <|tool|>y",
            "<|tool|><think>",
            "plain text only",
            "",
        ],
    },
    {
        # The shared phi-3 file as it is: "</s>" is user-defined; rstrip from the model name.
        "name": "phi-3",
        "base": "ggml-vocab-phi-3.gguf",
        "loaders": ["gguf"],
        "added": [],
        "texts": [
            "</s> hello",
            "Hi</s>\nthere",
            "a </s>b",
            "</s></s>  </s>",
            "<|user|>\nHi<|end|>\n<|assistant|>\n",
            "<s> x </s> y",
            "<|endoftext|> z",
            "<unk>  w",
            "plain text",
        ],
    },
]


def read_gguf(path):
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def numbers(key, conv):
        f = r.fields[key]
        return [conv(f.parts[i][0]) for i in f.data]

    d = {"model": bytes(r.fields["tokenizer.ggml.model"].parts[-1]).decode(),
         "tokens": strings("tokenizer.ggml.tokens"),
         "types": numbers("tokenizer.ggml.token_type", int)}
    if "tokenizer.ggml.merges" in r.fields:
        d["merges"] = strings("tokenizer.ggml.merges")
    if "tokenizer.ggml.scores" in r.fields:
        d["scores"] = numbers("tokenizer.ggml.scores", float)
    return d


def spm_merges(tokens, types, scores):
    """Merges of a SentencePiece BPE vocabulary, as transformers' SentencePieceExtractor makes
    them: every split of a normal piece into two vocabulary pieces, ordered by the piece's score."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, i in vocab.items():
        if types[i] != 1:
            continue
        local = [(piece[:k], piece[k:], scores[i]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)
    return [(a, b) for a, b, _ in merges]


def build(base, extra):
    """The Hugging Face tokenizer of `base` (read_gguf) with `extra` added tokens appended."""
    tokens = base["tokens"] + [a["content"] for a in extra]
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    if base["model"] == "gpt2":
        merges = [tuple(m.split(" ", 1)) for m in base["merges"]]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False,
                                   byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    else:
        merges = spm_merges(base["tokens"], base["types"], base["scores"])
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                                   byte_fallback=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                               normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return tok


def add_tokens(tok, specs):
    for a in specs:
        t = AddedToken(a["content"], single_word=False, lstrip=a["lstrip"], rstrip=a["rstrip"],
                       normalized=a["normalized"], special=a["special"])
        (tok.add_special_tokens if a["special"] else tok.add_tokens)([t])


def check_vocab_vectors(tok, name):
    """The rebuilt base tokenizer must reproduce the vocabulary's own test vectors."""
    path = os.path.join(VOCAB_DIR, name)
    with open(path + ".inp", encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    with open(path + ".out", encoding="utf-8") as f:
        outs = f.read().split("\n")
    n = 0
    for text, line in zip(texts, outs):
        want = [int(x) for x in line.split()]
        got = tok.encode(text, add_special_tokens=False).ids
        if got != want:
            sys.exit("%s: rebuilt tokenizer disagrees with %s.out on %r:\n want %s\n got  %s"
                     % (name, name, text, want, got))
        n += 1
    return n


def base_added_tokens(name, base):
    """Added tokens already in a base vocabulary, with their tokenizer.json attributes."""
    out = []
    phi3 = name == "ggml-vocab-phi-3.gguf"
    for t, ty in zip(base["tokens"], base["types"]):
        if ty not in (USER, CONTROL, UNKNOWN) or t.startswith("[PAD"):
            continue  # phi-3's [PADnnnnn] fill the GGUF vocabulary up to the embedding size
        rstrip = phi3 and t not in ("<unk>", "<s>", "<|endoftext|>")
        out.append(added(t, special=ty != USER, rstrip=rstrip))
    return out


def main():
    out_vocabs = []
    for v in VOCABS:
        base = read_gguf(os.path.join(VOCAB_DIR, v["base"]))
        tok = build(base, v["added"])
        add_tokens(tok, base_added_tokens(v["base"], base))
        n = check_vocab_vectors(tok, v["base"])
        add_tokens(tok, v["added"])
        first = len(base["tokens"])
        for k, a in enumerate(v["added"]):
            got = tok.token_to_id(a["content"])
            assert got == first + k, (a, got)
        cases = []
        for text in v["texts"]:
            tok.encode_special_tokens = True
            ids = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = False
            ids_special = tok.encode(text, add_special_tokens=False).ids
            decoded = tok.decode(ids, skip_special_tokens=False)
            cases.append({"text": text, "ids": ids, "ids_special": ids_special,
                          "decoded": decoded})
        out_vocabs.append({"name": v["name"], "base": v["base"], "loaders": v["loaders"],
                           "added": v["added"], "cases": cases})
        print("%s: base checked on %d vectors, %d cases" % (v["name"], n, len(cases)))
    out = {
        "generator": "tests/golden/make_added_tokens_golden.py (tokenizers %s)"
                     % __import__("tokenizers").__version__,
        "note": "added tokens get ids from the base vocabulary's size on, in order; ids: "
                "control-token text as plain text, user-defined tokens cut out; ids_special: "
                "control tokens parsed too; decoded: decode(ids)",
        "vocabs": out_vocabs,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
