#!/usr/bin/env python3
"""Renders chat templates exactly as transformers' apply_chat_template(tokenize=False) does.

The environment copies transformers' _compile_jinja_template: jinja2's ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and loop controls, a tojson filter that is json.dumps with
ensure_ascii=False, and the raise_exception / strftime_now globals; render() gets messages, tools
(None), documents (None), add_generation_prompt and the special tokens / extra kwargs. It needs
only jinja2 (pip install jinja2, or Debian's python3-jinja2), not transformers.

Input on stdin: a JSON list of {"template", "messages", "add_generation_prompt", "context"}.
Output on stdout: a JSON list of {"output": str} or {"error": str, "error_type": str}.
Used by tools/make_chat_template_fixtures.mjs.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """transformers' AssistantTracker without the mask bookkeeping: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render(job):
    try:
        template = compile_template(job["template"])
        kwargs = {"tools": None, "documents": None}
        kwargs.update(job.get("context") or {})
        return {"output": template.render(messages=job["messages"],
                                          add_generation_prompt=job["add_generation_prompt"], **kwargs)}
    except Exception as e:  # noqa: BLE001 - every template failure is an expected outcome here
        return {"error": str(e), "error_type": type(e).__name__}


def main():
    jobs = json.load(sys.stdin)
    json.dump([render(job) for job in jobs], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
