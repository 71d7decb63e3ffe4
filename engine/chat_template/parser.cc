// The parser: @huggingface/jinja's recursive descent, rule for rule (its precedence, its optional
// commas in lists, its statements). Node fields per type:
//   Program: a body | Text, String: str | Int, Float: num | Ident: str | Array, Tuple: a items
//   Object: a keys, b values | Binary: str op, x left, y right | Unary: str op, x
//   Filter: x operand, y filter (Ident or Call) | Test: x operand, str name, flag negated
//   Select: x value, y condition | Ternary: x condition, y then, z else
//   Member: x object, y property, flag computed | Slice: x start, y stop, z step (each optional)
//   Call: x callee, a args | KwArg: str name, x value | Spread, KwSpread: x
//   If: x test, a body, b else | For: x target, y iterable, a body, b else
//   Set: x target, y value (or a body) | Macro: str name, a params, b body
//   CallBlock: x the Call, a caller params, b body | FilterBlock: y filter, a body
#include <set>
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {
namespace {

NodeP node(N type) {
  auto n = std::make_unique<Node>();
  n->type = type;
  return n;
}

class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens)
      : source_(source), t_(std::move(tokens)) {}

  NodeP program() {
    auto p = node(N::Program);
    while (cur_ < t_.size()) p->a.push_back(any());
    return p;
  }

 private:
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.error("nesting limit passed: more than 256 levels");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // A chain of links at one level (a + b + c, x.y.z, x | f | g) nests the tree as deep as it is
  // long: each link counts toward the depth limit until the chain's rule returns.
  struct Chain {
    explicit Chain(Parser& p) : p_(p) {}
    void link() {
      ++n_;
      if (++p_.depth_ > kMaxDepth) p_.error("nesting limit passed: more than 256 levels");
    }
    ~Chain() { p_.depth_ -= n_; }
    Parser& p_;
    int n_ = 0;
  };

  [[noreturn]] void error(const std::string& message) {
    if (cur_ >= t_.size())
      syntax_error(source_, source_.size(), message + " (at the end of the template)");
    syntax_error(source_, t_[cur_].pos, message);
  }
  const Token& peek() {
    if (cur_ >= t_.size()) error("Unexpected end of template");
    return t_[cur_];
  }
  bool is(Tok a) const { return cur_ < t_.size() && t_[cur_].type == a; }
  bool is_ident(const char* name, size_t ahead = 0) const {
    return cur_ + ahead < t_.size() && t_[cur_ + ahead].type == Tok::Ident &&
           t_[cur_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<const char*> names) const {
    if (!(cur_ + 1 < t_.size() && t_[cur_].type == Tok::OpenStatement &&
          t_[cur_ + 1].type == Tok::Ident))
      return false;
    for (const char* n : names)
      if (t_[cur_ + 1].value == n) return true;
    return false;
  }
  const Token& expect(Tok type, const char* what) {
    if (!is(type)) error(std::string("Expected ") + what);
    return t_[cur_++];
  }
  void expect_ident(const char* name) {
    if (!is_ident(name)) error(std::string("Expected ") + name);
    ++cur_;
  }
  void body_until(std::initializer_list<const char*> ends, std::vector<NodeP>& out) {
    while (!is_statement(ends)) {
      if (cur_ >= t_.size()) {
        std::string names;
        for (const char* e : ends)
          names += std::string(names.empty() ? "" : " or ") + "{% " + e + " %}";
        error("Unexpected end of template: expected " + names);
      }
      out.push_back(any());
    }
  }
  void end_tag(const char* name) {
    expect(Tok::OpenStatement, "{%");
    expect_ident(name);
    expect(Tok::CloseStatement, "%}");
  }

  NodeP any() {
    Depth d(*this);
    const Token& tok = peek();
    switch (tok.type) {
      case Tok::Comment: {
        auto n = node(N::Comment);
        ++cur_;
        return n;
      }
      case Tok::Text: {
        auto n = node(N::Text);
        n->str = tok.value;
        ++cur_;
        return n;
      }
      case Tok::OpenStatement:
        return statement();
      case Tok::OpenExpression: {
        ++cur_;
        NodeP e = expression();
        expect(Tok::CloseExpression, "}}");
        return e;
      }
      default:
        error("Unexpected token: " + tok.value);
    }
  }

  NodeP statement() {
    expect(Tok::OpenStatement, "{%");
    if (!is(Tok::Ident)) error("Unknown statement");
    const std::string name = t_[cur_].value;
    NodeP r;
    if (name == "set") {
      ++cur_;
      r = node(N::Set);
      r->x = sequence(false);
      if (is(Tok::Equals)) {
        ++cur_;
        r->y = sequence(false);
      } else {
        expect(Tok::CloseStatement, "%}");
        body_until({"endset"}, r->a);
        expect(Tok::OpenStatement, "{%");
        expect_ident("endset");
      }
      expect(Tok::CloseStatement, "%}");
    } else if (name == "if") {
      ++cur_;
      r = if_statement();
      end_tag("endif");
    } else if (name == "macro") {
      ++cur_;
      r = node(N::Macro);
      NodeP id = primary();
      if (id->type != N::Ident) error("Expected identifier following macro statement");
      r->str = id->str;
      args(true, r->a);
      expect(Tok::CloseStatement, "%}");
      body_until({"endmacro"}, r->b);
      end_tag("endmacro");
    } else if (name == "for") {
      ++cur_;
      r = node(N::For);
      r->x = sequence(true);
      if (r->x->type != N::Ident && r->x->type != N::Tuple)
        error("Expected identifier/tuple for the loop variable");
      if (!is_ident("in")) error("Expected `in` keyword following loop variable");
      ++cur_;
      r->y = expression();
      expect(Tok::CloseStatement, "%}");
      body_until({"endfor", "else"}, r->a);
      if (is_statement({"else"})) {
        cur_ += 2;
        expect(Tok::CloseStatement, "%}");
        body_until({"endfor"}, r->b);
      }
      end_tag("endfor");
    } else if (name == "call") {
      ++cur_;
      r = node(N::CallBlock);
      if (is(Tok::OpenParen)) args(true, r->a);
      NodeP callee = primary();
      if (callee->type != N::Ident) error("Expected identifier following call statement");
      auto call = node(N::Call);
      call->x = std::move(callee);
      args(false, call->a);
      r->x = std::move(call);
      expect(Tok::CloseStatement, "%}");
      body_until({"endcall"}, r->b);
      end_tag("endcall");
    } else if (name == "break" || name == "continue") {
      ++cur_;
      expect(Tok::CloseStatement, "%}");
      r = node(name == "break" ? N::Break : N::Continue);
    } else if (name == "filter") {
      ++cur_;
      r = node(N::FilterBlock);
      NodeP f = primary();
      if (f->type == N::Ident && is(Tok::OpenParen)) f = call_expression(std::move(f));
      r->y = std::move(f);
      expect(Tok::CloseStatement, "%}");
      body_until({"endfilter"}, r->a);
      end_tag("endfilter");
    } else {
      error("Unknown statement type: " + name);
    }
    return r;
  }

  NodeP if_statement() {
    Depth d(*this);
    auto r = node(N::If);
    r->x = expression();
    expect(Tok::CloseStatement, "%}");
    body_until({"elif", "else", "endif"}, r->a);
    if (is_statement({"elif"})) {
      cur_ += 2;
      r->b.push_back(if_statement());
    } else if (is_statement({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStatement, "%}");
      body_until({"endif"}, r->b);
    }
    return r;
  }

  NodeP sequence(bool primary_only) {
    std::vector<NodeP> items;
    items.push_back(primary_only ? primary() : expression());
    const bool tuple = is(Tok::Comma);
    while (tuple) {
      ++cur_;
      items.push_back(primary_only ? primary() : expression());
      if (!is(Tok::Comma)) break;
    }
    if (!tuple) return std::move(items[0]);
    auto t = node(N::Tuple);
    t->a = std::move(items);
    return t;
  }

  NodeP expression() {
    Depth d(*this);
    NodeP a = logical_or();
    if (is_ident("if")) {
      ++cur_;
      NodeP test = logical_or();
      if (is_ident("else")) {
        ++cur_;
        auto t = node(N::Ternary);
        t->x = std::move(test);
        t->y = std::move(a);
        t->z = expression();
        return t;
      }
      auto s = node(N::Select);
      s->x = std::move(a);
      s->y = std::move(test);
      return s;
    }
    return a;
  }

  NodeP binary(std::string op, NodeP l, NodeP r) {
    auto b = node(N::Binary);
    b->str = std::move(op);
    b->x = std::move(l);
    b->y = std::move(r);
    return b;
  }

  NodeP logical_or() {
    Chain chain(*this);
    NodeP left = logical_and();
    while (is_ident("or")) {
      chain.link();
      ++cur_;
      left = binary("or", std::move(left), logical_and());
    }
    return left;
  }
  NodeP logical_and() {
    Chain chain(*this);
    NodeP left = negation();
    while (is_ident("and")) {
      chain.link();
      ++cur_;
      left = binary("and", std::move(left), negation());
    }
    return left;
  }
  NodeP negation() {
    if (is_ident("not")) {
      Depth d(*this);
      ++cur_;
      auto u = node(N::Unary);
      u->str = "not";
      u->x = negation();
      return u;
    }
    return comparison();
  }
  NodeP comparison() {
    Chain chain(*this);
    NodeP left = additive();
    while (true) {
      chain.link();
      std::string op;
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_ident("in")) {
        op = "in";
        ++cur_;
      } else if (is(Tok::Comparison)) {
        op = t_[cur_++].value;
      } else {
        break;
      }
      left = binary(op, std::move(left), additive());
    }
    return left;
  }
  NodeP additive() {
    Chain chain(*this);
    NodeP left = multiplicative();
    while (is(Tok::Additive)) {
      chain.link();
      const std::string op = t_[cur_++].value;
      left = binary(op, std::move(left), multiplicative());
    }
    return left;
  }
  NodeP multiplicative() {
    Chain chain(*this);
    NodeP left = power();
    while (is(Tok::Multiplicative)) {
      chain.link();
      const std::string op = t_[cur_++].value;
      left = binary(op, std::move(left), power());
    }
    return left;
  }
  NodeP power() {
    Chain chain(*this);
    NodeP left = test();
    while (is(Tok::Power)) {
      chain.link();
      ++cur_;
      left = binary("**", std::move(left), test());
    }
    return left;
  }
  NodeP test() {
    Chain chain(*this);
    NodeP operand = filter();
    while (is_ident("is")) {
      chain.link();
      ++cur_;
      const bool negate = is_ident("not");
      if (negate) ++cur_;
      NodeP name = primary();
      if (name->type != N::Ident) error("Expected identifier for the test");
      auto t = node(N::Test);
      t->x = std::move(operand);
      t->str = name->str;
      t->flag = negate;
      operand = std::move(t);
    }
    return operand;
  }
  NodeP filter() {
    Chain chain(*this);
    NodeP operand = unary_sign();
    while (is(Tok::Pipe)) {
      chain.link();
      ++cur_;
      NodeP f = primary();
      if (f->type != N::Ident) error("Expected identifier for the filter");
      if (is(Tok::OpenParen)) f = call_expression(std::move(f));
      auto n = node(N::Filter);
      n->x = std::move(operand);
      n->y = std::move(f);
      operand = std::move(n);
    }
    return operand;
  }
  NodeP unary_sign() {
    if (cur_ < t_.size() && (t_[cur_].type == Tok::Unary || t_[cur_].type == Tok::Additive) &&
        (t_[cur_].value == "-" || t_[cur_].value == "+")) {
      Depth d(*this);
      auto u = node(N::Unary);
      u->str = t_[cur_++].value;
      u->x = unary_sign();
      return u;
    }
    NodeP m = member(primary());
    if (is(Tok::OpenParen)) return call_expression(std::move(m));
    return m;
  }
  NodeP call_expression(NodeP callee) {
    Depth d(*this);
    auto c = node(N::Call);
    c->x = std::move(callee);
    args(false, c->a);
    NodeP e = member(std::move(c));
    if (is(Tok::OpenParen)) e = call_expression(std::move(e));
    return e;
  }
  void args(bool parameters, std::vector<NodeP>& out) {
    expect(Tok::OpenParen, "(");
    std::set<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!is(Tok::CloseParen)) {
      if (cur_ >= t_.size()) error("Expected )");
      const bool kw_spread = is(Tok::Power);
      const bool spread = is(Tok::Multiplicative) && t_[cur_].value == "*";
      if (parameters && (kw_spread || spread))
        error("Argument unpacking is not allowed in parameter declarations");
      if (kw_spread) {
        ++cur_;
        auto s = node(N::KwSpread);
        s->x = expression();
        out.push_back(std::move(s));
        if (is(Tok::Comma)) ++cur_;
        if (!is(Tok::CloseParen))
          error("Expected closing parenthesis: `**` must be applied to the final argument");
        break;
      }
      NodeP arg;
      if (spread) {
        if (saw_spread) error("Only one `*` argument unpacking is allowed");
        saw_spread = true;
        ++cur_;
        arg = node(N::Spread);
        arg->x = expression();
      } else {
        arg = expression();
        if (is(Tok::Equals)) {
          ++cur_;
          if (arg->type != N::Ident)
            error(parameters ? "Expected identifier for parameter declaration"
                             : "Expected identifier for keyword argument");
          auto kw = node(N::KwArg);
          kw->str = arg->str;
          kw->x = expression();
          arg = std::move(kw);
        }
        if (parameters) {
          if (arg->type != N::Ident && arg->type != N::KwArg)
            error("Expected identifier for parameter declaration");
          if (!names.insert(arg->str).second) error("Duplicate parameter name: " + arg->str);
        }
        if (arg->type == N::KwArg) {
          saw_keyword = true;
        } else if (saw_keyword) {
          error(parameters ? "Non-default argument follows default argument"
                           : "Positional arguments must come before keyword arguments");
        } else if (saw_spread) {
          error("Positional arguments must not follow `*` argument unpacking");
        }
      }
      out.push_back(std::move(arg));
      if (is(Tok::Comma)) ++cur_;
    }
    expect(Tok::CloseParen, ")");
  }
  NodeP member(NodeP object) {
    Chain chain(*this);
    while (is(Tok::Dot) || is(Tok::OpenSquare)) {
      chain.link();
      Depth d(*this);
      const bool computed = t_[cur_++].type == Tok::OpenSquare;
      auto m = node(N::Member);
      m->flag = computed;
      if (computed) {
        std::vector<NodeP> parts;  // null for an empty slice part
        bool slice = false;
        while (!is(Tok::CloseSquare)) {
          if (cur_ >= t_.size()) error("Expected ]");
          if (is(Tok::Colon)) {
            parts.push_back(nullptr);
            ++cur_;
            slice = true;
          } else {
            parts.push_back(expression());
            if (is(Tok::Colon)) {
              ++cur_;
              slice = true;
            }
          }
        }
        if (parts.empty()) error("Expected at least one argument for member/slice expression");
        if (slice) {
          if (parts.size() > 3) error("Expected 0-3 arguments for slice expression");
          auto s = node(N::Slice);
          s->x = std::move(parts[0]);
          if (parts.size() > 1) s->y = std::move(parts[1]);
          if (parts.size() > 2) s->z = std::move(parts[2]);
          m->y = std::move(s);
        } else {
          m->y = std::move(parts[0]);
        }
        expect(Tok::CloseSquare, "]");
      } else {
        m->y = primary();
        if (m->y->type != N::Ident && m->y->type != N::Int)
          error("Expected identifier or integer following dot operator");
      }
      m->x = std::move(object);
      object = std::move(m);
    }
    return object;
  }
  NodeP primary() {
    Depth d(*this);
    const Token& tok = peek();
    ++cur_;
    switch (tok.type) {
      case Tok::Number: {
        const bool is_float = tok.value.find('.') != std::string::npos;
        auto n = node(is_float ? N::Float : N::Int);
        n->num = std::strtod(tok.value.c_str(), nullptr);
        return n;
      }
      case Tok::String: {
        auto n = node(N::String);
        n->str = tok.value;
        while (is(Tok::String)) n->str += t_[cur_++].value;
        return n;
      }
      case Tok::Ident: {
        auto n = node(N::Ident);
        n->str = tok.value;
        return n;
      }
      case Tok::OpenParen: {
        NodeP e = sequence(false);
        expect(Tok::CloseParen, ")");
        return e;
      }
      case Tok::OpenSquare: {
        auto n = node(N::Array);
        while (!is(Tok::CloseSquare)) {
          if (cur_ >= t_.size()) error("Expected ]");
          n->a.push_back(expression());
          if (is(Tok::Comma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      case Tok::OpenCurly: {
        auto n = node(N::Object);
        while (!is(Tok::CloseCurly)) {
          if (cur_ >= t_.size()) error("Expected }");
          n->a.push_back(expression());
          expect(Tok::Colon, "colon between key and value in object literal");
          n->b.push_back(expression());
          if (is(Tok::Comma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      default:
        --cur_;
        error("Unexpected token: " + tok.value);
    }
  }

  const std::string& source_;
  std::vector<Token> t_;
  size_t cur_ = 0;
  int depth_ = 0;
};

}  // namespace

NodeP parse(const std::string& source, std::vector<Token> tokens) {
  return Parser(source, std::move(tokens)).program();
}

}  // namespace mixserve::jinja
