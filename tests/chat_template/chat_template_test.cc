// ChatTemplate's unit tests: each feature, syntax errors with their line and column,
// raise_exception, the limits. The byte-for-byte comparison with @huggingface/jinja is
// chat_template_oracle_test.cc; the expectations here were checked against it too.
#include "engine/chat_template.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace mixserve {
namespace {

using nlohmann::json;

std::string render(const std::string& src, const json& vars = json::object()) {
  return ChatTemplate(src).render(vars);
}

std::string error_of(const std::string& src, const json& vars = json::object()) {
  try {
    ChatTemplate(src).render(vars);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplate, PrintsTextAndExpressions) {
  EXPECT_EQ(render("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
  EXPECT_EQ(render("{{ 1 }} {{ 1.0 }} {{ 0.00001 }} {{ 0.0000001 }} {{ 2.5 }} {{ -0.0 }}"),
            "1 1.0 0.00001 1e-7 2.5 -0.0");
  EXPECT_EQ(render("{{ true }} {{ none }}|{{ missing }}|{{ [1, 'a', none, 1.0] }}"),
            "true ||[1, \"a\", null, 1]");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [true]} }}"), "{\"a\": 1, \"b\": [true]}");
  EXPECT_EQ(render("{{ 'a\\tb\\n\\'\\\"\\\\' }}"), "a\tb\n'\"\\");
  EXPECT_EQ(render("{{ '\\u00e9\\x41' }}"),
            "\xC3\xA9"
            "A");
  EXPECT_EQ(render("{{ 'ab' 'cd' }}"), "abcd");
  EXPECT_EQ(render("{{ 10 ** 21 }} {{ 1.5 * 10 ** 21 }}"), "1e+21 1.5e+21");
}

TEST(ChatTemplate, WhitespaceControl) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\n"), "x\n");  // trim_blocks, final newline
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");        // lstrip_blocks
  EXPECT_EQ(render("  {{ 'y' }}"), "  y");                      // not for expressions
  EXPECT_EQ(render("a {{- 'b' -}} c"), "abc");
  EXPECT_EQ(render("a {#- c -#} b"), "ab");
  EXPECT_EQ(render("x {% generation %} y {% endgeneration %} z"), "x  y  z");
  EXPECT_EQ(render("x {%- generation -%} y {%- endgeneration -%} z"), "xyz");
}

TEST(ChatTemplate, ControlFlow) {
  const json vars = {{"xs", {1, 2, 3}}};
  EXPECT_EQ(render("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
                   "loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
                   vars),
            "1032truefalse3,2121falsefalse3,3210falsetrue3,");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", vars),
            "-2;1-3;2-;");
  EXPECT_EQ(render("{% for x in xs if x != 2 %}{{ x }}{{ loop.length }}{% endfor %}", vars),
            "1232");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}"),
            "a=1 b=2 ");
  EXPECT_EQ(render("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}"), "ab");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% "
                   "break %}{% endif %}{{ x }}{% endfor %}",
                   vars),
            "1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% "
                   "endfor %}{{ ns.n }}",
                   vars),
            "6");
  EXPECT_EQ(render("{% set y = 1 %}{% for x in xs %}{% set y = x %}{% endfor %}{{ y }}", vars),
            "1");  // loop scope
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(render("{% set s %}x{{ 1 }}y{% endset %}[{{ s }}]"), "[x1y]");
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(ChatTemplate, Macros) {
  EXPECT_EQ(render("{% macro m(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ "
                   "m(b=3, a=4) }}"),
            "1d1243");
  EXPECT_EQ(render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, x=2) }}"),
            "[1]{\"x\": 2}");
  EXPECT_EQ(render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"),
            "<in>");
  EXPECT_EQ(
      render("{% macro w() %}{{ caller(5) }}{% endmacro %}{% call(n) w() %}n={{ n }}{% endcall %}"),
      "n=5");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "macro 'm' takes not more than 1 argument(s)");
}

TEST(ChatTemplate, OperatorsFollowJavaScript) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ "
                   "2 ** 3 }} {{ 2 ** -1 }}"),
            "3 -4 1 -1 3.5 2.0 8 0.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ 1.0 ~ true ~ [1, 2] }} {{ 'a' + 1 }} {{ [1] + [2] }}"),
            "a11true1,2 a1 [1, 2]");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ '1' == 1 }} {{ none == missing }} {{ [1] == [1] }} {{ 1 in "
                   "[1.0] }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }}"),
            "true true true false true true true");
  EXPECT_EQ(
      render("{{ 1 and 'x' }} {{ 0 or '' }}|{{ not [] }} {{ 'y' if 0 else 'n' }} {{ 'z' if 0 }}"),
      "x |true n ");
  EXPECT_EQ(render("{{ 1 not in missing }} {{ x is lower }}"), "true false");
  EXPECT_EQ(error_of("{{ missing in [1] }}"), "Cannot perform operation in on undefined values");
  EXPECT_EQ(error_of("{{ 1 + none }}"), "Cannot perform operation on null values");
  EXPECT_EQ(error_of("{{ missing + 1 }}"), "Cannot perform operation + on undefined values");
  EXPECT_EQ(error_of("{{ 'a' < 'b' }}"),
            "Unknown operator \"<\" between StringValue and StringValue");
  EXPECT_EQ(error_of("{{ ('t', 1) }}"), "Cannot convert to JSON: TupleValue");
}

TEST(ChatTemplate, MembersAndSlices) {
  const json vars = {{"m", {{"role", "user"}, {"list", {1, 2, 3}}}}};
  EXPECT_EQ(render("{{ m.role }} {{ m['role'] }} {{ m.list.1 }} {{ m.list[-1] }} {{ m.nope }}|{{ "
                   "m.role.nope }}|",
                   vars),
            "user user 2 3 ||");
  EXPECT_EQ(render("{{ [1,2,3,4,5][1:3] }} {{ [1,2,3][::-1] }} {{ 'hello'[::2] }} {{ "
                   "'h\xC3\xA9llo'[1:3] }} {{ 'abc'[-1] }}"),
            "[2, 3] [3, 2, 1] hlo \xC3\xA9l c");
  EXPECT_EQ(render("{{ m.get('role') }} {{ m.get('x', 'd') }} {{ m.get('x') }} {{ m.keys() | list "
                   "}} {{ m.list.length }}",
                   vars),
            "user d  [\"list\", \"role\"] 3");
  EXPECT_EQ(error_of("{{ missing[0] }}"),
            "Cannot access property with non-string: got IntegerValue");
}

TEST(ChatTemplate, Filters) {
  EXPECT_EQ(render("{{ ' a b ' | trim }}|{{ 'ab' | upper }}{{ 'AB' | lower }} {{ 'hello world' | "
                   "title }} {{ 'hELLO' | capitalize }}"),
            "a b|ABab Hello World HELLO");
  EXPECT_EQ(render("{{ [1, 2] | length }} {{ 'h\xC3\xA9' | length }} {{ '\xF0\x9F\x8C\x8D' | "
                   "length }} {{ {'a': 1} | length }}"),
            "2 2 2 1");
  EXPECT_EQ(render("{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }} {{ [3, 1, 2] | sort }} {{ ['b', "
                   "'A'] | sort }} {{ [1, 2] | reverse }}"),
            "32 [1, 2, 3] [\"A\", \"b\"] [2, 1]");
  EXPECT_EQ(render("{{ [1, 'a', none] | join }} {{ [1, 2] | join(', ') }} {{ 'abc' | join('-') }} "
                   "{{ [1, 1, 2] | unique }}"),
            "1a 1, 2 a-b-c [1, 2]");
  EXPECT_EQ(render("{{ 'aaa' | replace('a', 'b', 2) }} {{ ' x' | int }} {{ '3.5x' | float }} {{ "
                   "'q' | int(7) }} {{ 3.9 | int }} {{ -2 | abs }} {{ 5 | float }}"),
            "bba 0 3.5 7 3 2 5.0");
  EXPECT_EQ(render("{{ missing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', "
                   "true) }} {{ none | default('d') }}"),
            "d  d ");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | dictsort }} {{ {'a': 1} | items }}"),
            "[[\"a\", 2], [\"b\", 1]] [[\"a\", 1]]");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}"),
            "a\n    b\n\n    c|  a\n  b");
  const json vars = {{"ms", {{{"role", "user"}, {"n", 1}}, {{"role", "bot"}}}}};
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='n') | list }} "
                   "{{ ms | rejectattr('n') | length }} "
                   "{{ ms | map(attribute='n', default=0) | list }} {{ ms | sort(attribute='role') "
                   "| map(attribute='role') | join }}",
                   vars),
            "[1] 1 [1, 0] botuser");
  EXPECT_EQ(error_of("{{ [1] | round }}"), "Unknown ArrayValue filter: round");
}

TEST(ChatTemplate, Tojson) {
  const json vars = {{"v", {{"a", {1, 2}}, {"s", "\xC3\xA9\"\n<"}}}};
  EXPECT_EQ(render("{{ v | tojson }}", vars), "{\"a\": [1, 2], \"s\": \"\xC3\xA9\\\"\\n<\"}");
  EXPECT_EQ(render("{{ v | tojson(indent=2) }}", vars),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"s\": \"\xC3\xA9\\\"\\n<\"\n}");
  EXPECT_EQ(render("{{ v | tojson(ensure_ascii=true, separators=(',', ':')) }}", vars),
            "{\"a\":[1,2],\"s\":\"\\u00e9\\\"\\n<\"}");
  EXPECT_EQ(render("{{ [1.0, 0.5, missing, none] | tojson }} {{ {} | tojson(indent=2) }}"),
            "[1, 0.5, null, null] {}");
  // nlohmann::ordered_json keeps the request's key order, as the oracle does.
  EXPECT_EQ(ChatTemplate("{{ v | tojson }}")
                .render(nlohmann::ordered_json::parse(R"({"v": {"z": 1, "a": 2, "1": 3}})")),
            "{\"1\": 3, \"z\": 1, \"a\": 2}");
}

TEST(ChatTemplate, Tests) {
  EXPECT_EQ(render("{{ 1 is odd }}{{ 2 is even }}{{ none is none }}{{ 'a' is string }}{{ 1.5 is "
                   "number }}{{ 1 is integer }}"
                   "{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence "
                   "}}{{ x is defined }}"
                   "{{ x is undefined }}{{ x is not defined }}{{ 'ab' is lower }}{{ 'AB' is upper "
                   "}}{{ range is callable }}"),
            "truetruetruetruetruetruetruetruetruetruefalsetruetruetruetruetrue");
  EXPECT_EQ(error_of("{{ 1 is divisibleby }}"), "Unknown test: divisibleby");
}

TEST(ChatTemplate, StringMethods) {
  EXPECT_EQ(render("{{ ' a '.strip() }}|{{ ' a '.lstrip() }}|{{ ' a '.rstrip() }}|{{ 'a b  "
                   "c'.split() }}{{ 'a,b,c'.split(',', 1) }}"),
            "a|a | a|[\"a\", \"b\", \"c\"][\"a\", \"b,c\"]");
  EXPECT_EQ(render("{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.upper() "
                   "}}{{ 'a-b'.replace('-', '+') }}{{ 'ab cd'.title() }}"),
            "truetrueABCa+bAb Cd");
}

TEST(ChatTemplate, Globals) {
  EXPECT_EQ(render("{{ range(3) }} {{ range(1, 7, 2) }} {{ range(3, 0, -1) }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
  EXPECT_EQ(render("{{ True }}{{ False }}{{ None }}|"), "truefalse|");
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }} {{ strftime_now('%%') }}"), "4 %");
  EXPECT_EQ(error_of("{{ raise_exception('Roles must alternate') }}"), "Roles must alternate");
  EXPECT_EQ(error_of("{{ dict(a=1) }}"),
            "Cannot call something that is not a function: got UndefinedValue");
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("a\nb {% if %}"), "line 2, column 9: Unexpected token: %}");
  EXPECT_EQ(error_of("{% for x in y %}\n{{ x }}"),
            "line 2, column 8: Unexpected end of template: expected {% endfor %} or {% else %} (at "
            "the end of the template)");
  EXPECT_EQ(error_of("x\n\n  {{ 'abc }}"),
            "line 3, column 6: Unexpected end of input (unterminated string)");
  EXPECT_EQ(error_of("{{ a ! b }}"), "line 1, column 6: Unexpected character: !");
  EXPECT_EQ(error_of("{% endif %}"), "line 1, column 4: Unknown statement type: endif");
  EXPECT_EQ(error_of("{# open"), "line 1, column 1: Missing end of comment tag");
}

TEST(ChatTemplate, LimitsAreErrors) {
  EXPECT_EQ(
      error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").rfind("nesting limit passed", 0),
      0u);
  EXPECT_EQ(error_of("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}")
                .rfind("line 1, column 131: nesting limit passed", 0),
            0u);
  EXPECT_EQ(error_of("{{ range(2000000) }}").rfind("range limit passed", 0), 0u);
  EXPECT_EQ(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set "
                     "ns.s = ns.s ~ ns.s %}{% endfor %}")
                .rfind("string limit passed", 0),
            0u);
  EXPECT_EQ(
      error_of("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}")
          .rfind("work limit passed", 0),
      0u);
  EXPECT_EQ(error_of("{% set ns = namespace(a=[]) %}{% for i in range(300) %}{% set ns.a = [ns.a] "
                     "%}{% endfor %}")
                .rfind("nesting limit passed", 0),
            0u);
  EXPECT_EQ(error_of("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns | tojson }}")
                .rfind("nesting limit passed", 0),
            0u);
}

TEST(ChatTemplate, LongChainsAreNestingErrorsNotStackOverflows) {
  std::string members = "{{ x", sums = "{{ 1", filters = "{{ 'a'";
  for (int i = 0; i < 200000; ++i) {
    members += ".a";
    sums += " + 1";
    filters += " | upper";
  }
  for (const std::string& src : {members, sums, filters})
    EXPECT_NE(error_of(src + " }}").find("nesting limit passed"), std::string::npos);
  std::string ok = "{{ 0";
  for (int i = 0; i < 200; ++i) ok += " + 1";
  EXPECT_EQ(render(ok + " }}"), "200");
}

TEST(ChatTemplate, RendersFromManyThreadsAtOnce) {
  const ChatTemplate t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.content | upper }}{% endfor %}{{ ns.n }}");
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&, k] {
      const std::string digit(1, static_cast<char>('0' + k));
      const json vars = {{"messages", {{{"content", std::string("t").append(digit)}}}}};
      const std::string want = std::string("T").append(digit).append("1");
      for (int i = 0; i < 200; ++i)
        if (t.render(vars) != want) ++wrong;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ChatTemplate, IsMovableAndRendersRepeatedly) {
  ChatTemplate a("{{ x }}");
  ChatTemplate b = std::move(a);
  EXPECT_EQ(b.render(json{{"x", 1}}), "1");
  EXPECT_EQ(b.render(json{{"x", "two"}}), "two");
  EXPECT_EQ(error_of("{{ x }}", {{"range", 1}}), "Variable already declared: range");
}

}  // namespace
}  // namespace mixserve
