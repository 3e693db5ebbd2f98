#!/usr/bin/env python3
"""Renders the real chat templates in tests/golden/chat_templates/ with jinja2, the way Hugging Face
transformers renders `apply_chat_template`, and writes tests/golden/chat_golden.json for
tests/tokenizer/chat_template_test.cpp to compare against byte for byte.

Run with an interpreter that has jinja2 (CI does not need it; the JSON is committed):
    /opt/refpy/bin/python tests/golden/make_chat_golden.py
"""
import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_DIR = os.path.join(HERE, "chat_templates")

# name -> (family rz should recognise, bos_token, eos_token) as in each model's tokenizer_config.json
TEMPLATES = {
    "smollm2": ("chatml", "<|im_start|>", "<|im_end|>"),
    "qwen2_5": ("chatml", "", "<|im_end|>"),
    "llama3": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3_1": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama2": ("llama2", "<s>", "</s>"),
    "mistral_v1": ("mistral", "<s>", "</s>"),
    "mixtral_v1": ("mistral", "<s>", "</s>"),
    "mistral_v3": ("mistral", "<s>", "</s>"),
    "mistral_v7": ("mistral", "<s>", "</s>"),
    "phi3": ("phi3", "<s>", "<|endoftext|>"),
    "phi3_5": ("phi3", "<s>", "<|endoftext|>"),
    "phi3_mini_2404": ("phi3", "<s>", "<|endoftext|>"),
    "gemma3": ("gemma", "<bos>", "<eos>"),
}


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "single_user": [msg("user", "Hello!")],
    "system_user": [msg("system", "You are a terse assistant."), msg("user", "What is 2+2?")],
    "multi_turn": [
        msg("user", "Hi there"),
        msg("assistant", "   Hello! How can I help?  "),
        msg("user", "Tell me a joke.\n"),
    ],
    "system_multi_turn": [
        msg("system", "  Be brief.\n"),
        msg("user", " Hi"),
        msg("assistant", "Hello."),
        msg("user", "Bye "),
    ],
    "ends_with_assistant": [msg("user", "Hi"), msg("assistant", "Hello.")],
    "system_multi_ends_with_assistant": [
        msg("system", "Sys"),
        msg("user", "Q1"),
        msg("assistant", "A1"),
    ],
    "unicode_whitespace": [
        msg("user", "\u00a0\u3000 h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u2003\n"),
        msg("assistant", "\u2028ok\u00a0"),
        msg("user", "\t\u00e9t\u00e9\r\n"),
    ],
    "empty_user": [msg("system", "sys"), msg("user", "  ")],
    "only_system": [msg("system", "Just a system prompt.")],
    "two_users": [msg("user", "a"), msg("user", "b")],
    "mid_system": [msg("system", "s1"), msg("user", "u1"), msg("system", "s2"), msg("user", "u2")],
    "assistant_first": [msg("assistant", "I start."), msg("user", "ok")],
    "quotes_and_braces": [msg("user", "Say \"{{ hi }}\" and '{% raw %}'"), msg("assistant", "{{x}}")],
}


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    # What transformers' _compile_jinja_template builds (chat_template_utils.py).
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, separators=None, sort_keys=False: \
        json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def transformers_render(source, messages, agp, bos, eos):
    """The same rendering through transformers' own helper, when transformers is installed."""
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return None
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=source,
                                        add_generation_prompt=agp, bos_token=bos, eos_token=eos)
    return rendered[0]


def main():
    env = make_env()
    out = {"templates": {}, "cases": []}
    for name, (family, bos, eos) in TEMPLATES.items():
        with open(os.path.join(TEMPLATE_DIR, name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        out["templates"][name] = {"file": "chat_templates/" + name + ".jinja", "family": family,
                                  "bos_token": bos, "eos_token": eos}
        tmpl = env.from_string(source)
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (True, False):
                case = {"template": name, "conversation": conv_name, "messages": messages,
                        "add_generation_prompt": agp}
                try:
                    # transformers passes tools/documents (None when absent) and the special tokens.
                    case["output"] = tmpl.render(messages=messages, tools=None, documents=None,
                                                 add_generation_prompt=agp, bos_token=bos,
                                                 eos_token=eos)
                    case["error"] = False
                    ref = transformers_render(source, messages, agp, bos, eos)
                    if ref is not None and ref != case["output"]:
                        raise SystemExit(f"{name}/{conv_name}: jinja2 and transformers disagree")
                except (TemplateError, jinja2.exceptions.UndefinedError) as e:
                    case["output"] = None
                    case["error"] = True
                    case["error_message"] = str(e)
                out["cases"].append(case)
    path = os.path.join(HERE, "chat_golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", path, len(out["cases"]), "cases")


if __name__ == "__main__":
    main()
