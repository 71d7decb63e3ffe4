// The interpreter: statements, operators, calls, loops and macros as @huggingface/jinja's
// Interpreter evaluates them, with the limits of internal.h.
#include <cmath>
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {

Value Env::lookup(const std::string& name) const {
  for (const Env* e = this; e; e = e->parent.get()) {
    const auto it = e->vars.find(name);
    if (it != e->vars.end()) return it->second;
  }
  return undef();
}

Interp::~Interp() {
  // Namespaces are the only values changed after they are made, so the only way to a cycle or a
  // chain of unbounded depth: empty them all first, then let their contents go.
  std::vector<Object> contents;
  contents.reserve(namespaces.size());
  for (auto& ns : namespaces) contents.push_back(std::move(*ns));
  for (auto& ns : namespaces) *ns = Object{};
}

void Interp::charge(size_t units) {
  work_ += static_cast<int64_t>(units);
  if (work_ > kMaxWork) fail("work limit passed: the template took more than 20000000 steps");
}

namespace {
struct DepthGuard {
  explicit DepthGuard(int& d) : d_(d) {
    if (++d_ > kMaxDepth)
      fail("nesting limit passed: evaluation deeper than 256 (recursive macro?)");
  }
  ~DepthGuard() { --d_; }
  int& d_;
};
}  // namespace

std::string Interp::block(const std::vector<NodeP>& body, const EnvP& env) {
  std::string out;
  for (const NodeP& n : body) {
    const Value v = eval(*n, env);
    if (v.k == K::Null || v.k == K::Undefined) continue;
    if (v.is_str())
      out += v.str();
    else
      out += display(v);
    check_size(out.size());
  }
  charge(out.size() / 64);
  return out;
}

std::pair<std::vector<Value>, Object> Interp::arguments(const std::vector<NodeP>& args,
                                                        const EnvP& env) {
  std::vector<Value> positional;
  Object keywords;
  for (const NodeP& a : args) {
    if (a->type == N::Spread) {
      const Value v = eval(*a->x, env);
      if (!v.is_array()) fail(std::string("Cannot unpack non-iterable type: ") + type_name(v.k));
      for (const Value& x : *v.a) positional.push_back(x);
    } else if (a->type != N::KwArg && a->type != N::KwSpread) {
      positional.push_back(eval(*a, env));
    }
  }
  auto add = [&](const std::string& key, Value v) {
    if (keywords.find(key)) fail("Got multiple values for keyword argument '" + key + "'");
    keywords.set(key, std::move(v));
  };
  for (const NodeP& a : args) {
    if (a->type == N::KwArg) {
      add(a->str, eval(*a->x, env));
    } else if (a->type == N::KwSpread) {
      const Value v = eval(*a->x, env);
      if (!v.is_object())
        fail(std::string("Argument after ** must be a mapping, not ") + type_name(v.k));
      for (const auto& [k, x] : v.o->items) add(k, x);
    }
  }
  return {std::move(positional), std::move(keywords)};
}

Value Interp::eval(const Node& n, const EnvP& env) {
  DepthGuard guard(depth_);
  charge(1);
  switch (n.type) {
    case N::Program:
      return string(block(n.a, env));
    case N::Text:
    case N::String:
      return string(n.str);
    case N::Int:
      return integer(n.num);
    case N::Float:
      return floating(n.num);
    case N::Ident:
      return env->lookup(n.str);
    case N::Comment:
      return null();
    case N::Array:
    case N::Tuple: {
      Array items;
      for (const NodeP& x : n.a) items.push_back(eval(*x, env));
      return array(std::move(items), n.type == N::Tuple ? K::Tuple : K::Array);
    }
    case N::Object: {
      Object o;
      for (size_t i = 0; i < n.a.size(); ++i) {
        const Value key = eval(*n.a[i], env);
        if (!key.is_str())
          fail(std::string("Object keys must be strings: got ") + type_name(key.k));
        o.set(key.str(), eval(*n.b[i], env));
      }
      return object(std::move(o));
    }
    case N::Binary:
      return eval_binary(n, env);
    case N::Unary: {
      const Value v = eval(*n.x, env);
      if (n.str == "not") return boolean(!truthy(v));
      if (v.is_num() || v.k == K::Bool) {
        const double x = v.k == K::Bool ? (v.b ? 1 : 0) : v.n;
        const double r = n.str == "-" ? -x : x;
        return v.k == K::Float ? floating(r) : integer(r);
      }
      fail("Unknown operator \"" + n.str + "\" for " + type_name(v.k));
    }
    case N::Filter: {
      const Value operand = eval(*n.x, env);
      return apply_filter(operand, *n.y, env);
    }
    case N::FilterBlock:
      return apply_filter(string(block(n.a, env)), *n.y, env);
    case N::Test: {
      const Value operand = eval(*n.x, env);
      const bool r = run_test(n.str, operand, nullptr, false);
      return boolean(n.flag ? !r : r);
    }
    case N::Select: {
      if (!truthy(eval(*n.y, env))) return undef();
      return eval(*n.x, env);
    }
    case N::Ternary:
      return truthy(eval(*n.x, env)) ? eval(*n.y, env) : eval(*n.z, env);
    case N::Member:
      return eval_member(n, env);
    case N::Call:
      return eval_call(n, env);
    case N::If:
      return string(block(truthy(eval(*n.x, env)) ? n.a : n.b, env));
    case N::For:
      return eval_for(n, env);
    case N::Set:
      return eval_set(n, env);
    case N::Macro:
      env->vars[n.str] = make_macro(n, "'" + n.str + "'", n.a, n.b, nullptr);
      return null();
    case N::CallBlock: {
      const Value caller = make_macro(n, "None", n.a, n.b, env);
      auto [args, kwargs] = arguments(n.x->a, env);
      args.push_back(object(std::move(kwargs), K::KwArgs));
      const Value fn = eval(*n.x->x, env);
      if (fn.k != K::Function)
        fail(std::string("Cannot call something that is not a function: got ") + type_name(fn.k));
      auto scope = std::make_shared<Env>();
      scope->parent = env;
      scope->vars["caller"] = caller;
      return fn.f->call(*this, args, scope);
    }
    case N::Break:
      throw BreakSignal{};
    case N::Continue:
      throw ContinueSignal{};
    case N::Slice:
    case N::KwArg:
    case N::Spread:
    case N::KwSpread:
      break;
  }
  fail("Unknown node type");
}

Value Interp::eval_binary(const Node& n, const EnvP& env) {
  const std::string& op = n.str;
  const Value left = eval(*n.x, env);
  if (op == "and") return truthy(left) ? eval(*n.y, env) : left;
  if (op == "or") return truthy(left) ? left : eval(*n.y, env);
  const Value right = eval(*n.y, env);
  if (op == "==") return boolean(loose_equal(left, right));
  if (op == "!=") return boolean(!loose_equal(left, right));
  const bool in = op == "in", not_in = op == "not in";
  if (left.k == K::Undefined || right.k == K::Undefined) {
    if (right.k == K::Undefined && (in || not_in)) return boolean(not_in);
    fail("Cannot perform operation " + op + " on undefined values");
  }
  if (left.k == K::Null || right.k == K::Null) fail("Cannot perform operation on null values");
  auto concat = [&](std::string a, const std::string& b) {
    check_size(a.size() + b.size());
    charge((a.size() + b.size()) / 16);
    a += b;
    return string(std::move(a));
  };
  if (op == "~") return concat(raw_string(left), raw_string(right));
  const auto numeric_like = [](const Value& v) { return v.is_num() || v.k == K::Bool; };
  if (op == "**" && numeric_like(left) && numeric_like(right)) {
    const double a = left.k == K::Bool ? left.b : left.n;
    const double b = right.k == K::Bool ? right.b : right.n;
    if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power");
    const double r = std::pow(a, b);
    if (!std::isfinite(r)) fail("Exponentiation result is not a finite real number");
    return (left.k == K::Float || right.k == K::Float || b < 0) ? floating(r) : integer(r);
  }
  if (left.is_num() && right.is_num()) {
    const double a = left.n, b = right.n;
    const bool is_float = left.k == K::Float || right.k == K::Float;
    auto num = [&](double r) { return is_float ? floating(r) : integer(r); };
    if (op == "+") return num(a + b);
    if (op == "-") return num(a - b);
    if (op == "*") return num(a * b);
    if (op == "/") return floating(a / b);
    if (op == "//") return num(std::floor(a / b));
    if (op == "%") return num(std::fmod(a, b));
    if (op == "<") return boolean(a < b);
    if (op == ">") return boolean(a > b);
    if (op == ">=") return boolean(a >= b);
    if (op == "<=") return boolean(a <= b);
  } else if (left.is_array() && right.is_array()) {
    if (op == "+") {
      check_items(left.a->size() + right.a->size());
      charge(left.a->size() + right.a->size());
      Array items = *left.a;
      items.insert(items.end(), right.a->begin(), right.a->end());
      return array(std::move(items));
    }
  } else if (right.is_array()) {
    if (in || not_in) {
      charge(right.a->size());
      bool member = false;
      for (const Value& x : *right.a)
        if (strict_equal(x, left)) {
          member = true;
          break;
        }
      return boolean(in ? member : !member);
    }
  }
  if ((left.is_str() || right.is_str()) && op == "+")
    return concat(raw_string(left), raw_string(right));
  if (left.is_str() && right.is_str() && (in || not_in)) {
    const bool found = right.str().find(left.str()) != std::string::npos;
    return boolean(in ? found : !found);
  }
  if (left.is_str() && right.is_object() && (in || not_in)) {
    const bool found = right.o->find(left.str()) != nullptr;
    return boolean(in ? found : !found);
  }
  fail("Unknown operator \"" + op + "\" between " + type_name(left.k) + " and " +
       type_name(right.k));
}

Value Interp::eval_member(const Node& n, const EnvP& env) {
  const Value object = eval(*n.x, env);
  if (n.flag && n.y->type == N::Slice) {
    if (!object.is_array() && !object.is_str()) fail("Slice object must be an array or string");
    const Node& s = *n.y;
    auto part = [&](const NodeP& p, const char* what) {
      const Value v = p ? eval(*p, env) : undef();
      if (v.k != K::Int && v.k != K::Undefined)
        fail(std::string("Slice ") + what + " must be numeric or undefined");
      return v;
    };
    const Value start = part(s.x, "start"), stop = part(s.y, "stop"), step = part(s.z, "step");
    std::vector<std::string> chars;
    if (object.is_str()) chars = code_points(object.str());
    const double len = static_cast<double>(object.is_str() ? chars.size() : object.a->size());
    const double st = step.k == K::Int ? step.n : 1;
    const int dir = st > 0 ? 1 : st < 0 ? -1 : 0;
    double b, e;
    if (dir >= 0) {
      b = start.k == K::Int ? start.n : 0;
      b = b < 0 ? std::max(len + b, 0.0) : std::min(b, len);
      e = stop.k == K::Int ? stop.n : len;
      e = e < 0 ? std::max(len + e, 0.0) : std::min(e, len);
    } else {
      b = start.k == K::Int ? start.n : len - 1;
      b = b < 0 ? std::max(len + b, -1.0) : std::min(b, len - 1);
      e = stop.k == K::Int ? stop.n : -1;
      e = e < -1 ? std::max(len + e, -1.0) : std::min(e, len - 1);
    }
    const double stride = std::max(-(len + 2), std::min(len + 2, st));
    std::string text;
    Array items;
    if (dir != 0) {
      for (double i = b; dir * i < dir * e; i += stride) {
        const auto k = static_cast<size_t>(i);
        if (object.is_str())
          text += chars[k];
        else
          items.push_back((*object.a)[k]);
      }
    }
    charge(items.size() + text.size() / 64);
    return object.is_str() ? string(std::move(text)) : array(std::move(items));
  }
  Value property;
  if (n.flag)
    property = eval(*n.y, env);
  else if (n.y->type == N::Int)
    property = integer(n.y->num);
  else
    property = string(n.y->str);
  return member(object, property);
}

Value Interp::eval_call(const Node& n, const EnvP& env) {
  auto [args, kwargs] = arguments(n.a, env);
  if (!kwargs.items.empty()) args.push_back(object(std::move(kwargs), K::KwArgs));
  const Value fn = eval(*n.x, env);
  if (fn.k != K::Function)
    fail(std::string("Cannot call something that is not a function: got ") + type_name(fn.k));
  return fn.f->call(*this, args, env);
}

Value Interp::eval_set(const Node& n, const EnvP& env) {
  const Value rhs = n.y ? eval(*n.y, env) : string(block(n.a, env));
  const Node& target = *n.x;
  if (target.type == N::Ident) {
    env->vars[target.str] = rhs;
  } else if (target.type == N::Tuple) {
    if (!rhs.is_array())
      fail(std::string("Cannot unpack non-iterable type in set: ") + type_name(rhs.k));
    if (rhs.a->size() != target.a.size())
      fail(std::string("Too ") + (target.a.size() > rhs.a->size() ? "few" : "many") +
           " items to unpack in set");
    for (size_t i = 0; i < target.a.size(); ++i) {
      if (target.a[i]->type != N::Ident) fail("Cannot unpack to non-identifier in set");
      env->vars[target.a[i]->str] = (*rhs.a)[i];
    }
  } else if (target.type == N::Member) {
    const Value object = eval(*target.x, env);
    if (object.k != K::Namespace) fail("cannot assign attribute on non-namespace object");
    if (target.flag || target.y->type != N::Ident)
      fail("Cannot assign to member with non-identifier property");
    object.o->set(target.y->str, rhs);
    check_items(object.o->items.size());
  } else {
    fail("Invalid LHS inside assignment expression");
  }
  return null();
}

Value Interp::eval_for(const Node& n, const EnvP& env) {
  auto scope = std::make_shared<Env>();
  scope->parent = env;
  const Node* test = nullptr;
  Value iterable;
  if (n.y->type == N::Select) {
    iterable = eval(*n.y->x, scope);
    test = n.y->y.get();
  } else {
    iterable = eval(*n.y, scope);
  }
  if (iterable.is_object()) {
    Array keys;
    for (const auto& kv : iterable.o->items) keys.push_back(string(kv.first));
    iterable = array(std::move(keys));
  } else if (!iterable.is_array()) {
    fail(std::string("Expected iterable or object type in for loop: got ") + type_name(iterable.k));
  }
  const Node& target = *n.x;
  auto bind = [&](const Value& item, Env& into) {
    if (target.type == N::Ident) {
      into.vars[target.str] = item;
      return;
    }
    for (size_t j = 0; j < target.a.size(); ++j) {
      if (target.a[j]->type != N::Ident) fail("Cannot unpack non-identifier type");
      into.vars[target.a[j]->str] = (*item.a)[j];
    }
  };
  std::shared_ptr<const Array> kept = iterable.a;  // the items that pass the loop's filter
  if (test || target.type == N::Tuple) {
    Array items;
    for (const Value& item : *iterable.a) {
      if (target.type == N::Tuple) {
        if (item.k != K::Array)
          fail(std::string("Cannot unpack non-iterable type: ") + type_name(item.k));
        if (target.a.size() != item.a->size())
          fail(std::string("Too ") + (target.a.size() > item.a->size() ? "few" : "many") +
               " items to unpack");
      }
      if (test) {
        auto loop_scope = std::make_shared<Env>();
        loop_scope->parent = scope;
        bind(item, *loop_scope);
        if (!truthy(eval(*test, loop_scope))) continue;
      }
      items.push_back(item);
    }
    kept = std::make_shared<const Array>(std::move(items));
  }
  const Array& items = *kept;
  std::string out;
  bool no_iteration = true;
  const size_t count = items.size();
  for (size_t i = 0; i < count; ++i) {
    if (++iterations_ > kMaxLoopIterations)
      fail("loop limit passed: more than 10000000 loop iterations");
    charge(2);
    Object loop;
    loop.items.reserve(9);
    const double di = static_cast<double>(i), dn = static_cast<double>(count);
    loop.set("index", integer(di + 1));
    loop.set("index0", integer(di));
    loop.set("revindex", integer(dn - di));
    loop.set("revindex0", integer(dn - di - 1));
    loop.set("first", boolean(i == 0));
    loop.set("last", boolean(i + 1 == count));
    loop.set("length", integer(dn));
    loop.set("previtem", i > 0 ? items[i - 1] : undef());
    loop.set("nextitem", i + 1 < count ? items[i + 1] : undef());
    scope->vars["loop"] = object(std::move(loop));
    bind(items[i], *scope);
    try {
      out += block(n.a, scope);
      check_size(out.size());
    } catch (const ContinueSignal&) {
      continue;
    } catch (const BreakSignal&) {
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) out += block(n.b, scope);
  check_size(out.size());
  return string(std::move(out));
}

void special_arguments(const std::vector<NodeP>& params, const std::vector<NodeP>& body,
                       bool& kwargs, bool& varargs) {
  bool declared_kwargs = false, declared_varargs = false;
  kwargs = varargs = false;
  auto declare = [&](const std::string& name) {
    if (name == "kwargs") declared_kwargs = true;
    if (name == "varargs") declared_varargs = true;
  };
  std::function<void(const Node&)> declare_target = [&](const Node& t) {
    if (t.type == N::Ident) declare(t.str);
    if (t.type == N::Tuple)
      for (const NodeP& x : t.a) declare_target(*x);
  };
  std::function<void(const Node*)> visit = [&](const Node* n) {
    if (!n) return;
    auto all = [&](const std::vector<NodeP>& v) {
      for (const NodeP& x : v) visit(x.get());
    };
    auto params_of = [&](const std::vector<NodeP>& ps) {
      for (const NodeP& p : ps) declare(p->str);
      for (const NodeP& p : ps)
        if (p->type == N::KwArg) visit(p->x.get());
    };
    switch (n->type) {
      case N::For:
        declare_target(*n->x);
        if (n->y->type == N::Select) {
          visit(n->y->x.get());
          all(n->a);
          all(n->b);
          visit(n->y->y.get());
        } else {
          visit(n->y.get());
          all(n->a);
          all(n->b);
        }
        return;
      case N::Set:
        declare_target(*n->x);
        visit(n->y.get());
        all(n->a);
        return;
      case N::Macro:
        params_of(n->a);
        all(n->b);
        return;
      case N::CallBlock:
        visit(n->x.get());
        params_of(n->a);
        all(n->b);
        return;
      case N::FilterBlock:
        all(n->a);
        if (n->y->type == N::Call) all(n->y->a);
        return;
      case N::Ident:
        if (n->str == "kwargs" && !declared_kwargs) kwargs = true;
        if (n->str == "varargs" && !declared_varargs) varargs = true;
        return;
      case N::Member:
        visit(n->x.get());
        if (n->flag) visit(n->y.get());
        return;
      case N::Filter:
        visit(n->x.get());
        if (n->y->type == N::Call) all(n->y->a);
        return;
      case N::Test:
        visit(n->x.get());
        return;
      case N::Select:
        visit(n->y.get());
        visit(n->x.get());
        return;
      case N::KwArg:
        visit(n->x.get());
        return;
      default:
        visit(n->x.get());
        visit(n->y.get());
        visit(n->z.get());
        all(n->a);
        all(n->b);
    }
  };
  for (const NodeP& p : params) declare(p->str);
  for (const NodeP& x : body) visit(x.get());
}

void Interp::bind_arguments(const std::string& name, const std::vector<NodeP>& params,
                            bool want_kwargs, bool want_varargs, std::vector<Value> args,
                            const EnvP& scope) {
  Object keywords;
  if (!args.empty() && args.back().k == K::KwArgs) {
    keywords = *args.back().o;
    args.pop_back();
  }
  std::vector<std::pair<std::string, const Node*>> pending;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& pname = params[i]->str;
    const Node* def = params[i]->type == N::KwArg ? params[i]->x.get() : nullptr;
    Value v;
    bool have = i < args.size();
    if (have) v = args[i];
    if (!have && keywords.find(pname)) {
      v = *keywords.find(pname);
      Object rest;
      for (auto& kv : keywords.items)
        if (kv.first != pname) rest.set(kv.first, kv.second);
      keywords = std::move(rest);
      have = true;
    }
    if (!have && def) pending.emplace_back(pname, def);
    scope->vars[pname] = have ? v : undef();
  }
  if (want_kwargs) {
    scope->vars["kwargs"] = object(std::move(keywords));
  } else if (!keywords.items.empty()) {
    fail("macro " + name + " takes no keyword argument '" + keywords.items.front().first + "'");
  }
  if (want_varargs) {
    Array extra;
    for (size_t i = params.size(); i < args.size(); ++i) extra.push_back(args[i]);
    scope->vars["varargs"] = array(std::move(extra));
  } else if (args.size() > params.size()) {
    fail("macro " + name + " takes not more than " + std::to_string(params.size()) +
         " argument(s)");
  }
  for (const auto& [pname, def] : pending) scope->vars[pname] = eval(*def, scope);
}

// A macro (defining == nullptr: its body runs in a scope below the caller's, as the oracle's do)
// or a call block's caller (its body runs below the scope where the block stands).
Value Interp::make_macro(const Node& n, const std::string& display_name,
                         const std::vector<NodeP>& params, const std::vector<NodeP>& body,
                         const EnvP& defining) {
  bool want_kwargs = false, want_varargs = false;
  special_arguments(params, body, want_kwargs, want_varargs);
  const Node* node = &n;
  (void)node;
  const std::vector<NodeP>* p = &params;
  const std::vector<NodeP>* b = &body;
  return function([=](Interp& in, std::vector<Value>& args, const EnvP& caller) {
    auto scope = std::make_shared<Env>();
    scope->parent = defining ? defining : caller;
    in.bind_arguments(display_name, *p, want_kwargs, want_varargs, args, scope);
    return string(in.block(*b, scope));
  });
}

}  // namespace mixserve::jinja
