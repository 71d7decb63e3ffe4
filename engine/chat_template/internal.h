// The chat-template renderer's parts (engine/chat_template.h is the interface): the lexer and
// parser build a Node tree once; the interpreter (eval.cc, filters.cc) walks it with Values whose
// semantics follow @huggingface/jinja's runtime (numbers are doubles, strings are UTF-8 here where
// they are UTF-16 there; see docs/chat-templates.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/chat_template.h"

namespace mixserve::jinja {

// Limits: a passed one is a ChatTemplateError naming it.
inline constexpr int kMaxDepth = 256;  // parser and evaluator recursion, value nesting
inline constexpr int64_t kMaxLoopIterations = 10'000'000;
inline constexpr size_t kMaxString = 64u << 20;  // any string built, the output included
inline constexpr size_t kMaxItems = 1'000'000;   // any list or dict built (range() included)
inline constexpr int64_t kMaxWork = 20'000'000;  // evaluation steps plus items and bytes touched

[[noreturn]] void fail(const std::string& message);

// ---- lexer -------------------------------------------------------------------------------------
enum class Tok {
  Text,
  Number,
  String,
  Ident,
  Equals,
  OpenParen,
  CloseParen,
  OpenStatement,
  CloseStatement,
  OpenExpression,
  CloseExpression,
  OpenSquare,
  CloseSquare,
  OpenCurly,
  CloseCurly,
  Comma,
  Dot,
  Colon,
  Pipe,
  Additive,
  Multiplicative,
  Power,
  Comparison,
  Unary,
  Comment
};
struct Token {
  Tok type;
  std::string value;
  size_t pos;  // byte offset in the original source
};
// Throws ChatTemplateError("line L, column C: ...").
std::vector<Token> tokenize(const std::string& source);
[[noreturn]] void syntax_error(const std::string& source, size_t pos, const std::string& message);

// ---- AST ---------------------------------------------------------------------------------------
enum class N {
  Program,
  Text,
  String,
  Int,
  Float,
  Ident,
  Array,
  Tuple,
  Object,
  Binary,
  Unary,
  Filter,
  Test,
  Select,
  Ternary,
  Member,
  Slice,
  Call,
  KwArg,
  Spread,
  KwSpread,
  If,
  For,
  Set,
  Macro,
  CallBlock,
  FilterBlock,
  Break,
  Continue,
  Comment
};
struct Node;
using NodeP = std::unique_ptr<Node>;
// Field use per type is listed in parser.cc.
struct Node {
  N type;
  std::string str;
  double num = 0;
  bool flag = false;
  NodeP x, y, z;
  std::vector<NodeP> a, b;
};
NodeP parse(const std::string& source, std::vector<Token> tokens);

// ---- values ------------------------------------------------------------------------------------
enum class K {
  Undefined,
  Null,
  Bool,
  Int,
  Float,
  String,
  Array,
  Tuple,
  Object,
  KwArgs,
  Namespace,
  Function
};
struct Value;
struct Object;
struct Function;
using Array = std::vector<Value>;
struct Value {
  K k = K::Undefined;
  bool b = false;
  double n = 0;
  std::shared_ptr<const std::string> s;
  std::shared_ptr<const Array> a;
  std::shared_ptr<Object>
      o;  // Object, KwArgs (never changed once built), Namespace (changed by set)
  std::shared_ptr<const Function> f;
  int depth = 0;  // nesting of lists and dicts (a namespace counts 1: see Ctx::namespaces)

  bool is_str() const { return k == K::String; }
  bool is_num() const { return k == K::Int || k == K::Float; }
  bool is_array() const { return k == K::Array || k == K::Tuple; }
  bool is_object() const { return k == K::Object || k == K::KwArgs; }
  bool is_container() const { return is_object() || k == K::Namespace; }
  const std::string& str() const { return *s; }
};
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  std::unordered_map<std::string, size_t> index;  // built once items grows past a few
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);  // replaces in place or appends
};

Value undef();
Value null();
Value boolean(bool b);
Value integer(double n);
Value floating(double n);
Value string(std::string s);
Value array(Array items, K kind = K::Array);
Value object(Object o, K kind = K::Object);

class Interp;
struct Env;
struct Function {
  // args: positional, then one KwArgs value when keyword arguments were given.
  std::function<Value(Interp&, std::vector<Value>&, const std::shared_ptr<Env>&)> call;
};
Value function(std::function<Value(Interp&, std::vector<Value>&, const std::shared_ptr<Env>&)> fn);

// Printing, as the oracle prints (value.cc).
std::string js_number(double d);         // JavaScript's String(number)
std::string display(const Value& v);     // RuntimeValue.toString(): what {{ v }} prints
std::string raw_string(const Value& v);  // String(v.value): what `~` and `+` concatenate
struct JsonOptions {
  int indent = 0;
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_separators = false;
  std::string item_sep, key_sep;
};
std::string to_json(const Value& v, const JsonOptions& opt, bool undefined_as_null = true);
std::string json_quote(std::string_view s, bool ensure_ascii);
bool truthy(const Value& v);
bool loose_equal(const Value& a, const Value& b);   // JavaScript's ==
bool strict_equal(const Value& a, const Value& b);  // JavaScript's === on the raw values
const char* type_name(K k);
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

// Strings: UTF-8 here, UTF-16 in the oracle (str.cc).
uint32_t decode_utf8(std::string_view s, size_t& i);  // one code point, invalid bytes as U+FFFD
void append_utf8(std::string& out, uint32_t cp);
bool js_space(uint32_t cp);  // JavaScript's \s
std::string js_trim(std::string_view s, bool start, bool end);
// JavaScript's toUpperCase/toLowerCase of one code point (casemap.cc); false when unchanged.
bool case_map(uint32_t cp, bool upper, std::string& out);
std::string js_upper(std::string_view s);
std::string js_lower(std::string_view s);
std::string title_case(std::string_view s);
size_t utf16_length(std::string_view s);
std::vector<std::string> code_points(std::string_view s);
double js_parse_int(std::string_view s);    // parseInt(s, 10): NaN when no digits
double js_parse_float(std::string_view s);  // parseFloat(s)
double js_to_number(std::string_view s);    // Number(s)
std::string js_replace(std::string_view s, const std::string& from, const std::string& to,
                       double count);
std::string strftime_now(const std::string& format);

// ---- interpreter -------------------------------------------------------------------------------
struct Env {
  std::shared_ptr<Env> parent;
  std::unordered_map<std::string, Value> vars;
  Value lookup(const std::string& name) const;
};
using EnvP = std::shared_ptr<Env>;

struct BreakSignal {};
struct ContinueSignal {};

class Interp {
 public:
  ~Interp();
  Value eval(const Node& n, const EnvP& env);
  std::string block(const std::vector<NodeP>& body, const EnvP& env);
  void charge(size_t units);  // the work budget
  void check_size(size_t bytes) const {
    if (bytes > kMaxString) fail("string limit passed: a string or the output grew past 64 MiB");
  }
  void check_items(size_t n) const {
    if (n > kMaxItems) fail("list limit passed: a list or dict grew past 1000000 items");
  }
  std::vector<std::shared_ptr<Object>> namespaces;  // every namespace made, emptied at the end

  // filters.cc
  Value apply_filter(const Value& operand, const Node& filter, const EnvP& env);
  bool run_test(const std::string& name, const Value& operand, const Value* arg, bool has_arg);
  Value member(const Value& object, const Value& property);
  std::pair<std::vector<Value>, Object> arguments(const std::vector<NodeP>& args, const EnvP& env);

 private:
  Value eval_binary(const Node& n, const EnvP& env);
  Value eval_for(const Node& n, const EnvP& env);
  Value eval_set(const Node& n, const EnvP& env);
  Value eval_call(const Node& n, const EnvP& env);
  Value eval_member(const Node& n, const EnvP& env);
  Value make_macro(const Node& n, const std::string& display_name, const std::vector<NodeP>& params,
                   const std::vector<NodeP>& body, const EnvP& defining);
  void bind_arguments(const std::string& name, const std::vector<NodeP>& params, bool want_kwargs,
                      bool want_varargs, std::vector<Value> args, const EnvP& scope);
  int depth_ = 0;
  int64_t work_ = 0;
  int64_t iterations_ = 0;
};

// methods.cc
int compare_values(const Value& a, const Value& b, bool case_sensitive);  // sort's, dictsort's
// A call's argument: positional i, else keyword name, else def (the filters' and methods' rule).
Value pick(const std::vector<Value>& args, size_t i, const Object& kw, const char* name, Value def);
Value object_items(const Object& o);
Value string_method(const std::string& name, const Value& self);  // undefined when none
Value object_method(const std::string& name, const Value& self);  // undefined when none
void special_arguments(const std::vector<NodeP>& params, const std::vector<NodeP>& body,
                       bool& kwargs, bool& varargs);

}  // namespace mixserve::jinja
