// Chat templates against transformers' apply_chat_template: every case in
// tests/fixtures/chat_templates/ (rendered by Python's jinja2 configured as transformers does, see
// tools/make_chat_template_fixtures.mjs) must match byte for byte; plus error statuses, limits and
// robustness against hostile templates.
#include "kvserve/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/makemodel/synthetic_tokenizer.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

const fs::path kFixtures = fs::path(KVSERVE_FIXTURES_DIR) / "chat_templates";

ojson read_fixture(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return ojson::parse(s.str());
}

std::vector<fs::path> fixture_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

ChatTemplate parse_ok(std::string_view source, const ChatTemplateLimits& limits = {}) {
  Result<ChatTemplate> t = ChatTemplate::parse(source, limits);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : ChatTemplate::parse("").value();
}

// Renders `source` with no messages and the given context.
Result<std::string> render(std::string_view source, const json& context = json::object()) {
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  if (!t.is_ok()) return t.status();
  return t->render(json::array(), false, context);
}

std::string render_ok(std::string_view source, const json& context = json::object()) {
  Result<std::string> r = render(source, context);
  EXPECT_TRUE(r.is_ok()) << source << ": " << r.status().to_string();
  return r.is_ok() ? *r : std::string();
}

// --- fixtures -----------------------------------------------------------------------------------

TEST(ChatTemplateFixtures, EveryCaseMatchesTransformers) {
  const std::vector<fs::path> files = fixture_files();
  ASSERT_GE(files.size(), 15u);
  size_t cases = 0;
  size_t errors = 0;
  for (const fs::path& file : files) {
    const ojson fixture = read_fixture(file);
    SCOPED_TRACE(file.filename().string());
    Result<ChatTemplate> t = ChatTemplate::parse(fixture.at("template").get<std::string>());
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    for (const ojson& c : fixture.at("cases")) {
      SCOPED_TRACE(c.at("conversation").get<std::string>() +
                   (c.at("add_generation_prompt").get<bool>() ? " +gen" : ""));
      ++cases;
      const Result<std::string> r =
          t->render(c.at("messages"), c.at("add_generation_prompt").get<bool>(), c.at("context"));
      if (c.contains("expected")) {
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        EXPECT_EQ(*r, c.at("expected").get<std::string>());
        continue;
      }
      ++errors;
      ASSERT_FALSE(r.is_ok()) << "expected the error: " << c.at("error").get<std::string>();
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      if (c.at("error_type") == "TemplateError") {  // raise_exception: the template's message
        EXPECT_EQ(r.status().message(), c.at("error").get<std::string>());
      }
    }
  }
  EXPECT_GE(cases, 700u);
  EXPECT_GE(errors, 50u);
}

TEST(ChatTemplateFixtures, MakeModelTemplatesAreTheFixtures) {
  const auto qwen = makemodel::make_synthetic_tokenizer(makemodel::TokenizerStyle::kQwen2);
  const auto llama = makemodel::make_synthetic_tokenizer(makemodel::TokenizerStyle::kLlama3);
  EXPECT_EQ(qwen.chat_template,
            read_fixture(kFixtures / "kvserve_chatml.json").at("template").get<std::string>())
      << "make-model's template changed: rerun tools/make_chat_template_fixtures.mjs";
  EXPECT_EQ(llama.chat_template,
            read_fixture(kFixtures / "kvserve_llama3.json").at("template").get<std::string>())
      << "make-model's template changed: rerun tools/make_chat_template_fixtures.mjs";
}

TEST(ChatTemplateFixtures, TokenizerDirectoryTemplateRenders) {
  auto tok = Tokenizer::from_directory(fs::path(KVSERVE_FIXTURES_DIR) / "tokenizers" / "qwen2");
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const ChatTemplate t = parse_ok((*tok)->chat_template());
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const Result<std::string> r = t.render(messages, true);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// --- API behaviour ------------------------------------------------------------------------------

TEST(ChatTemplate, VariablesAsTransformersPassesThem) {
  const ChatTemplate t = parse_ok(
      "{{ messages | length }} {{ add_generation_prompt }} {{ tools is none }} "
      "{{ documents is none }} {{ bos_token }} {{ missing is defined }}");
  const json messages = json::array({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(*t.render(messages, true, {{"bos_token", "<s>"}}), "1 True True True <s> False");
  EXPECT_EQ(*t.render(messages, false), "1 False True True  False");
  const ChatTemplate tools = parse_ok("{{ tools | length }}");
  EXPECT_EQ(*tools.render(messages, false, {{"tools", json::array({1, 2})}}), "2");
}

TEST(ChatTemplate, OrderedJsonKeepsKeyOrderForTojson) {
  const ChatTemplate t = parse_ok("{{ tools | tojson }}");
  const ojson tools =
      ojson::parse(R"([{"name": "f", "description": "d", "args": {"b": 1, "a": 2}}])");
  EXPECT_EQ(*t.render(ojson::array(), false, ojson{{"tools", tools}}),
            R"([{"name": "f", "description": "d", "args": {"b": 1, "a": 2}}])");
  // nlohmann::json sorts object keys; the ordered overload is the one a server should use.
  EXPECT_EQ(*t.render(json::array(), false, json{{"tools", json::parse(tools.dump())}}),
            R"([{"args": {"a": 2, "b": 1}, "description": "d", "name": "f"}])");
}

TEST(ChatTemplate, ContentPartsNullAndFloatsReachTheTemplateUnchanged) {
  const ChatTemplate t = parse_ok(
      "{% for m in messages %}{{ m.content is string }},{{ m.content is none }},"
      "{{ m.content }};{% endfor %}");
  const json messages = json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}]},
          {"role": "assistant", "content": null}, {"role": "user", "content": 1.0}])");
  EXPECT_EQ(*t.render(messages, false),
            "False,False,[{'text': 'a', 'type': 'text'}];False,True,None;False,False,1.0;");
}

TEST(ChatTemplate, StrftimeNow) {
  const std::string r =
      render_ok("{{ strftime_now('%Y') | int > 2000 }} {{ strftime_now('%d %b %Y') | length }}");
  EXPECT_EQ(r, "True 11");
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  const ChatTemplate t = parse_ok(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.role }}{{ ns.n }}{% endfor %}");
  json messages = json::array();
  for (int i = 0; i < 50; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "x"}});
  const std::string expected = *t.render(messages, false);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (*t.render(messages, false) != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// --- errors -------------------------------------------------------------------------------------

void expect_syntax_error(std::string_view source, std::string_view where, std::string_view what) {
  const Result<ChatTemplate> t = ChatTemplate::parse(source);
  ASSERT_FALSE(t.is_ok()) << source;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(where), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find(what), std::string::npos) << t.status().message();
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  expect_syntax_error("line one\n{{ 1 + }}", "line 2, column 8", "unexpected end of print");
  expect_syntax_error("{% for m in messages %}\n\n{{ m }}", "line 3",
                      "expected 'endfor' or 'else'");
  expect_syntax_error("a\nb {% if x %}{% endfor %}", "line 2, column 16", "unknown tag 'endfor'");
  expect_syntax_error("{{ x | nosuchfilter }}", "line 1, column 8",
                      "no filter named 'nosuchfilter'");
  expect_syntax_error("{{ x is nosuchtest }}", "line 1", "no test named 'nosuchtest'");
  expect_syntax_error("\n\n  {{ 'unterminated }}", "line 3, column 6", "unterminated string");
  expect_syntax_error("{% break %}", "line 1", "'break' outside loop");
  expect_syntax_error("{# never closed", "line 1, column 1", "missing end of comment tag");
  expect_syntax_error("{{ a ! b }}", "line 1, column 6", "unexpected char '!'");
  expect_syntax_error("{{ (1 + 2 }}", "line 1", "unexpected '}'");
  expect_syntax_error("{% include 'x.j2' %}", "line 1", "not supported");
  expect_syntax_error("{% frobnicate %}", "line 1", "unknown tag 'frobnicate'");
  expect_syntax_error("{{ 'é' }}\n  {{ 1 +* 2 }}", "line 2, column 9", "unexpected '*'");
}

TEST(ChatTemplateErrors, RaiseExceptionKeepsTheTemplatesMessage) {
  const ChatTemplate t = parse_ok(
      "{% for m in messages %}{% if m.role == 'tool' %}"
      "{{ raise_exception('Tool messages are not supported: ' ~ loop.index0) }}{% endif %}"
      "{% endfor %}");
  const json messages =
      json::parse(R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}])");
  const Result<std::string> r = t.render(messages, false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Tool messages are not supported: 1");
}

TEST(ChatTemplateErrors, BadInputs) {
  const ChatTemplate t = parse_ok("{{ messages }}");
  for (const json& bad : {json::object(), json("text"), json(nullptr), json(3)}) {
    const Result<std::string> r = t.render(bad, false);
    ASSERT_FALSE(r.is_ok()) << bad.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("must be a JSON array"), std::string::npos);
  }
  EXPECT_FALSE(t.render(json::array({"not an object"}), false).is_ok());
  EXPECT_FALSE(t.render(json::array(), false, json::array()).is_ok());
  EXPECT_FALSE(t.render(json::array(), false, {{"messages", 1}}).is_ok());
}

TEST(ChatTemplateErrors, RuntimeErrorsAreInvalidArgumentWithAPlace) {
  const auto expect_error = [](std::string_view source, std::string_view what) {
    const Result<std::string> r = render(source);
    ASSERT_FALSE(r.is_ok()) << source;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("chat template line"), std::string::npos)
        << r.status().message();
  };
  expect_error("\n{{ nope() }}", "'nope' is undefined");
  expect_error("{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str");
  expect_error("{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'");
  expect_error("{{ missing.attr }}", "'missing' is undefined");
  expect_error("{{ {'a': 1}.b.c }}", "'dict object' has no attribute 'b'");
  expect_error("{{ messages[0]['role'] }}", "list object has no element 0");
  expect_error("{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'");
  expect_error("{{ 1 // 0 }}", "division or modulo by zero");
  expect_error("{{ messages.append(1) }}", "unsafe");
  expect_error("{{ none | length }}", "has no len()");
  expect_error("{{ x | tojson }}", "not JSON serializable");
  expect_error("{% set a, b = [1] %}", "not enough values to unpack");
  expect_error("{{ 'abc'[::0] }}", "slice step cannot be zero");
  expect_error("{% set x = 1 %}{% set x.y = 2 %}", "non-namespace");
}

TEST(ChatTemplateErrors, UndefinedIsLenientWhereJinja2IsLenient) {
  EXPECT_EQ(render_ok("[{{ x }}][{{ x | default('d') }}][{{ x | length }}][{{ 'a' ~ x }}]"
                      "[{% for i in x %}no{% else %}empty{% endfor %}]"
                      "[{{ x is defined }}][{{ 1 in x }}][{{ x == x }}][{{ not x }}]"),
            "[][d][0][a][empty][False][False][True][True]");
  EXPECT_EQ(render_ok("{% if x %}a{% elif x is undefined %}b{% endif %}"), "b");
}

// --- limits and robustness ----------------------------------------------------------------------

TEST(ChatTemplateRobustness, DeepNestingIsASyntaxErrorNotACrash) {
  const std::string parens = std::string(100000, '(') + "1" + std::string(100000, ')');
  expect_syntax_error("{{ " + parens + " }}", "line 1", "nested too deeply");
  std::string nots;
  for (int i = 0; i < 100000; ++i)
    nots += "not ";
  expect_syntax_error("{{ " + nots + "x }}", "line 1", "nested too deeply");
  std::string chain = "1";
  for (int i = 0; i < 100000; ++i)
    chain += " + 1";
  expect_syntax_error("{{ " + chain + " }}", "line 1", "nested too deeply");
  std::string blocks;
  for (int i = 0; i < 10000; ++i)
    blocks += "{% if true %}";
  expect_syntax_error(blocks, "line 1", "nested too deeply");
  std::string lists = std::string(50000, '[') + std::string(50000, ']');
  expect_syntax_error("{{ " + lists + " }}", "line 1", "nested too deeply");
  // Modest nesting is fine.
  EXPECT_EQ(render_ok("{{ " + std::string(50, '(') + "2" + std::string(50, ')') + " * 3 }}"), "6");
}

TEST(ChatTemplateRobustness, LongTemplatesRender) {
  std::string source;
  std::string expected;
  for (int i = 0; i < 20000; ++i) {
    source += "line " + std::to_string(i) + " {{ " + std::to_string(i) + " * 2 }}\n";
    expected += "line " + std::to_string(i) + " " + std::to_string(i * 2) + "\n";
  }
  expected.pop_back();  // jinja2 drops the template's trailing newline
  EXPECT_EQ(render_ok(source), expected);
}

TEST(ChatTemplateRobustness, PathologicalLoopsHitTheLimits) {
  const auto expect_limit = [](std::string_view source, std::string_view what,
                               const ChatTemplateLimits& limits = {}) {
    const Result<ChatTemplate> t = ChatTemplate::parse(source, limits);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    const Result<std::string> r = t->render(json::array(), false);
    ASSERT_FALSE(r.is_ok()) << source;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  ChatTemplateLimits small;
  small.max_steps = 200000;
  expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               "evaluation steps", small);
  expect_limit("{{ 'x' * 1000000000000 }}", "bytes of values");
  expect_limit("{{ range(1000000000000) | length }}", "bytes of values");
  expect_limit(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "bytes of values");
  expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nested");
  ChatTemplateLimits tiny_output;
  tiny_output.max_output_bytes = 1000;
  expect_limit("{% for i in range(2000) %}x{% endfor %}", "exceeds 1000 bytes", tiny_output);
  expect_limit("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", "nested too deeply");
  expect_limit("{{ 2 ** 1000 }}", "integer overflow");
  expect_limit(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}",
      "nested too deeply");
}

TEST(ChatTemplateRobustness, DeeplyNestedInputIsAnError) {
  json deep = json::array();
  for (int i = 0; i < 5000; ++i)
    deep = json::array({deep});
  const ChatTemplate t = parse_ok("{{ d | length }}");
  const Result<std::string> r = t.render(json::array(), false, {{"d", deep}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplateRobustness, RandomTemplatesNeverCrash) {
  static const char* const kPieces[] = {
      "{{",     "}}",        "{%",       "%}",    "{#",       "#}",        "-",       "+",
      " ",      "\n",        "for",      "in",    "if",       "else",      "elif",    "endif",
      "endfor", "set",       "=",        "x",     "messages", "loop",      ".",       "[",
      "]",      "(",         ")",        "{",     "}",        "'s'",       "\"t\"",   "1",
      "2.5",    "|",         "length",   "trim",  "is",       "not",       "defined", "and",
      "or",     ",",         ":",        "~",     "*",        "/",         "//",      "%",
      "**",     "==",        "<",        "macro", "endmacro", "namespace", "ns",      "raw",
      "endraw", "break",     "continue", "none",  "true",     "tojson",    "items",   "join",
      "\\",     "'",         "\"",       "é",     "\xff",     "range",     "with",    "endwith",
      "filter", "endfilter", "map",      "select"};
  std::mt19937 rng(1234);
  const json messages = json::parse(R"([{"role": "user", "content": "hi"}])");
  int parsed = 0;
  for (int n = 0; n < 3000; ++n) {
    std::string source;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i)
      source += kPieces[rng() % std::size(kPieces)];
    ChatTemplateLimits limits;
    limits.max_steps = 100000;
    const Result<ChatTemplate> t = ChatTemplate::parse(source, limits);
    if (!t.is_ok()) {
      EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    ++parsed;
    const Result<std::string> r = t->render(messages, n % 2 == 0);
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << source;
    }
  }
  EXPECT_GT(parsed, 100);
}

}  // namespace
}  // namespace kvserve::tokenizer
