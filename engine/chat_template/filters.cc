// Filters, tests and the methods of strings and dicts, as @huggingface/jinja's runtime has them
// (the same names, the same argument rules, the same errors where it has them).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {
namespace {

// getAttributeValue: a dotted path through dicts, namespaces and list indexes.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_container()) {
      const Value* x = v.o->find(part);
      v = x ? *x : undef();
    } else if (v.is_array()) {
      const double idx = js_parse_int(part);
      if (std::isnan(idx) || idx < 0 || idx >= static_cast<double>(v.a->size())) return undef();
      v = (*v.a)[static_cast<size_t>(idx)];
    } else {
      return undef();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

const Value* arg_at(const std::vector<Value>& args, size_t i) {
  return i < args.size() ? &args[i] : nullptr;
}

Value sorted(Interp& in, const Array& items, bool reverse, bool case_sensitive,
             const Value* attribute) {
  in.charge(items.size() * 4);
  std::vector<Value> keys;
  Array out = items;
  if (attribute && attribute->k != K::Null) {
    const std::string path = attribute->is_str() ? attribute->str() : js_number(attribute->n);
    std::vector<std::pair<Value, Value>> pairs;
    for (const Value& x : items) pairs.emplace_back(attribute_path(x, path), x);
    std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& a, const auto& b) {
      const int r = compare_values(a.first, b.first, case_sensitive);
      return reverse ? r > 0 : r < 0;
    });
    for (size_t i = 0; i < pairs.size(); ++i) out[i] = pairs[i].second;
    return array(std::move(out));
  }
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    const int r = compare_values(a, b, case_sensitive);
    return reverse ? r > 0 : r < 0;
  });
  return array(std::move(out));
}

bool known_test(const std::string& name) {
  static const char* kTests[] = {"boolean",  "callable",  "odd",      "even",   "false",
                                 "true",     "none",      "string",   "number", "integer",
                                 "iterable", "mapping",   "sequence", "lower",  "upper",
                                 "defined",  "undefined", "equalto",  "eq"};
  for (const char* t : kTests)
    if (name == t) return true;
  return false;
}

}  // namespace

Value pick(const std::vector<Value>& args, size_t i, const Object& kw, const char* name,
           Value def) {
  if (const Value* v = arg_at(args, i)) return *v;
  if (const Value* v = kw.find(name)) return *v;
  return def;
}

bool Interp::run_test(const std::string& name, const Value& v, const Value* arg, bool has_arg) {
  (void)has_arg;
  if (name == "boolean") return v.k == K::Bool;
  if (name == "callable") return v.k == K::Function;
  if (name == "odd" || name == "even") {
    if (v.k != K::Int) fail("cannot " + name + " on " + type_name(v.k));
    const bool odd = std::fmod(v.n, 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "false") return v.k == K::Bool && !v.b;
  if (name == "true") return v.k == K::Bool && v.b;
  if (name == "none") return v.k == K::Null;
  if (name == "string") return v.is_str();
  if (name == "number") return v.is_num();
  if (name == "integer") return v.k == K::Int;
  if (name == "iterable") return v.k == K::Array || v.is_str();
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_str();
  if (name == "lower" || name == "upper") {
    return v.is_str() && v.str() == (name == "lower" ? js_lower(v.str()) : js_upper(v.str()));
  }
  if (name == "defined") return v.k != K::Undefined;
  if (name == "undefined") return v.k == K::Undefined;
  if (name == "equalto" || name == "eq") {
    // `x is eq` passes the test no value: the oracle fails reading it.
    if (!arg) fail("Cannot read properties of undefined (reading 'value')");
    return strict_equal(v, *arg);
  }
  fail("Unknown test: " + name);
}

Value Interp::apply_filter(const Value& operand, const Node& filter, const EnvP& env) {
  if (filter.type == N::Ident) {
    const std::string& f = filter.str;
    if (f == "safe") return operand;
    if (f == "tojson") {
      std::string s = to_json(operand, JsonOptions{});
      check_size(s.size());
      charge(s.size() / 64);
      return string(std::move(s));
    }
    if (operand.is_array()) {
      const Array& items = *operand.a;
      if (f == "list") return operand;
      if (f == "first" || f == "last") {
        if (items.empty())
          fail("`" + f +
               "` of an empty list (the oracle returns a JavaScript undefined, then fails on it)");
        return f == "first" ? items.front() : items.back();
      }
      if (f == "length") return integer(static_cast<double>(items.size()));
      if (f == "reverse") {
        charge(items.size());
        return array(Array(items.rbegin(), items.rend()));
      }
      if (f == "sort") return sorted(*this, items, false, false, nullptr);
      if (f == "join") {
        std::string out;
        for (const Value& x : items) {
          if (x.k != K::Null && x.k != K::Undefined) out += raw_string(x);
          check_size(out.size());
        }
        charge(items.size() + out.size() / 64);
        return string(std::move(out));
      }
      if (f == "string") return string(to_json(operand, JsonOptions{}, false));
      if (f == "unique") {
        charge(items.size() * 2);
        Array out;
        for (const Value& x : items) {
          bool seen = false;
          for (const Value& y : out)
            if (x.is_num() && y.is_num() && std::isnan(x.n) && std::isnan(y.n))
              seen = true;
            else if (strict_equal(x, y))
              seen = true;
          charge(out.size());
          if (!seen) out.push_back(x);
        }
        return array(std::move(out));
      }
      fail("Unknown ArrayValue filter: " + f);
    }
    if (operand.is_str()) {
      const std::string& s = operand.str();
      if (f == "length" || f == "upper" || f == "lower" || f == "title" || f == "capitalize") {
        const Value m = string_method(f, operand);
        if (m.k == K::Int) return m;
        std::vector<Value> none;
        return m.f->call(*this, none, env);
      }
      if (f == "trim") return string(js_trim(s, true, true));
      if (f == "indent") {
        std::string out;
        size_t start = 0;
        bool first = true;
        while (true) {
          const size_t nl = s.find('\n', start);
          const std::string line =
              s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
          if (!first) out += '\n';
          if (!first && !line.empty()) out += "    ";
          out += line;
          first = false;
          if (nl == std::string::npos) break;
          start = nl + 1;
        }
        check_size(out.size());
        return string(std::move(out));
      }
      if (f == "join" || f == "string") return operand;
      if (f == "int") {
        const double v = js_parse_int(s);
        return integer(std::isnan(v) ? 0 : v);
      }
      if (f == "float") {
        const double v = js_parse_float(s);
        return floating(std::isnan(v) ? 0 : v);
      }
      fail("Unknown StringValue filter: " + f);
    }
    if (operand.is_num()) {
      if (f == "abs")
        return operand.k == K::Int ? integer(std::fabs(operand.n)) : floating(std::fabs(operand.n));
      if (f == "int") return integer(std::floor(operand.n));
      if (f == "float") return floating(operand.n);
      if (f == "string") return string(display(operand));
      fail("Unknown NumericValue filter: " + f);
    }
    if (operand.is_object()) {
      if (f == "items") {
        charge(operand.o->items.size());
        return object_items(*operand.o);
      }
      if (f == "length") return integer(static_cast<double>(operand.o->items.size()));
      const Value m = object_method(f, operand);
      if (m.k == K::Function) {
        std::vector<Value> none;
        return m.f->call(*this, none, env);
      }
      fail("Unknown ObjectValue filter: " + f);
    }
    if (operand.k == K::Bool) {
      if (f == "bool") return operand;
      if (f == "int") return integer(operand.b ? 1 : 0);
      if (f == "float") return floating(operand.b ? 1 : 0);
      if (f == "string") return string(operand.b ? "true" : "false");
      fail("Unknown BooleanValue filter: " + f);
    }
    fail("Cannot apply filter \"" + f + "\" to type: " + type_name(operand.k));
  }
  if (filter.type != N::Call || filter.x->type != N::Ident)
    fail("Unknown filter: MemberExpression");
  const std::string& f = filter.x->str;
  const std::vector<NodeP>& fargs = filter.a;
  if (f == "tojson") {
    auto [args, kw] = arguments(fargs, env);
    JsonOptions opt;
    bool indent_negative = false;
    const Value indent = pick({}, 0, kw, "indent", null());
    if (indent.k != K::Int && indent.k != K::Null) fail("If set, indent must be a number");
    if (indent.k == K::Int) {
      if (indent.n > 1000) fail("indent limit passed: tojson indent above 1000");
      if (indent.n < 0) indent_negative = true;  // fails on the first list or dict, as the oracle's
      opt.indent = indent_negative ? -1 : static_cast<int>(indent.n);
    }
    const Value ascii = pick({}, 0, kw, "ensure_ascii", boolean(false));
    if (ascii.k != K::Bool) fail("If set, ensure_ascii must be a boolean");
    const Value sort = pick({}, 0, kw, "sort_keys", boolean(false));
    if (sort.k != K::Bool) fail("If set, sort_keys must be a boolean");
    const Value seps = pick({}, 0, kw, "separators", null());
    if (seps.is_array()) {
      if (seps.a->size() != 2 || !(*seps.a)[0].is_str() || !(*seps.a)[1].is_str())
        fail("separators must be a tuple of two strings");
      opt.has_separators = true;
      opt.item_sep = (*seps.a)[0].str();
      opt.key_sep = (*seps.a)[1].str();
    } else if (seps.k != K::Null) {
      fail("If set, separators must be a tuple of two strings");
    }
    opt.ensure_ascii = ascii.b;
    opt.sort_keys = sort.b;
    std::string s = to_json(operand, opt);
    check_size(s.size());
    charge(s.size() / 64);
    return string(std::move(s));
  }
  if (f == "join") {
    std::vector<std::string> parts;
    if (operand.is_str()) {
      parts = code_points(operand.str());
    } else if (operand.is_array()) {
      for (const Value& x : *operand.a)
        parts.push_back(x.k == K::Null || x.k == K::Undefined ? "" : raw_string(x));
    } else {
      fail("Cannot apply filter \"join\" to type: " + std::string(type_name(operand.k)));
    }
    auto [args, kw] = arguments(fargs, env);
    const Value sep = pick(args, 0, kw, "separator", string(""));
    if (!sep.is_str()) fail("separator must be a string");
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i) out += sep.str();
      out += parts[i];
      check_size(out.size());
    }
    charge(parts.size() + out.size() / 64);
    return string(std::move(out));
  }
  if (f == "int" || f == "float") {
    auto [args, kw] = arguments(fargs, env);
    const bool is_int = f == "int";
    const Value def = pick(args, 0, kw, "default", is_int ? integer(0) : floating(0));
    if (operand.is_str()) {
      const double v = is_int ? js_parse_int(operand.str()) : js_parse_float(operand.str());
      if (std::isnan(v)) return def;
      return is_int ? integer(v) : floating(v);
    }
    if (operand.is_num()) return operand;
    if (operand.k == K::Bool) return is_int ? integer(operand.b) : floating(operand.b);
    fail("Cannot apply filter \"" + f + "\" to type: " + type_name(operand.k));
  }
  if (f == "default") {
    auto [args, kw] = arguments(fargs, env);
    const Value def = args.size() > 0 ? args[0] : string("");
    const Value flag = pick(args, 1, kw, "boolean", boolean(false));
    if (flag.k != K::Bool) fail("`default` filter flag must be a boolean");
    if (operand.k == K::Undefined || (flag.b && !truthy(operand))) return def;
    return operand;
  }
  if (operand.is_array()) {
    const Array& items = *operand.a;
    if (f == "sort") {
      auto [args, kw] = arguments(fargs, env);
      const Value rev = pick(args, 0, kw, "reverse", boolean(false));
      if (rev.k != K::Bool) fail("reverse must be a boolean");
      const Value cs = pick(args, 1, kw, "case_sensitive", boolean(false));
      if (cs.k != K::Bool) fail("case_sensitive must be a boolean");
      const Value attr = pick(args, 2, kw, "attribute", null());
      if (!attr.is_str() && attr.k != K::Int && attr.k != K::Null)
        fail("attribute must be a string, integer, or null");
      return sorted(*this, items, rev.b, cs.b, &attr);
    }
    if (f == "selectattr" || f == "rejectattr") {
      const bool select = f == "selectattr";
      for (const Value& x : items)
        if (!x.is_container()) fail("`" + f + "` can only be applied to array of objects");
      for (const NodeP& a : fargs)
        if (a->type != N::String) fail("arguments of `" + f + "` must be strings");
      std::vector<Value> vals;
      for (const NodeP& a : fargs) vals.push_back(eval(*a, env));
      if (vals.empty()) fail("`" + f + "` needs an attribute name");
      if (vals.size() > 1 && !known_test(vals[1].str())) fail("Unknown test: " + vals[1].str());
      charge(items.size());
      Array out;
      for (const Value& x : items) {
        const Value* a = x.o->find(vals[0].str());
        bool r = false;
        if (a) {
          if (vals.size() > 1) {
            const std::string& test = vals[1].str();
            if ((test == "equalto" || test == "eq") && vals.size() < 3)
              fail("`" + f + "` with the test " + test +
                   " needs a value (the oracle throws a TypeError)");
            r = run_test(test, *a, vals.size() > 2 ? &vals[2] : nullptr, vals.size() > 2);
          } else {
            r = truthy(*a);
          }
        }
        if (r == select) out.push_back(x);
      }
      return array(std::move(out));
    }
    if (f == "map") {
      auto [args, kw] = arguments(fargs, env);
      const Value* attr = kw.find("attribute");
      if (!attr) fail("`map` expressions without `attribute` set are not currently supported.");
      if (!attr->is_str()) fail("attribute must be a string");
      const Value* def = kw.find("default");
      charge(items.size());
      Array out;
      for (const Value& x : items) {
        if (!x.is_container()) fail("items in map must be an object");
        Value v = attribute_path(x, attr->str());
        if (v.k == K::Undefined && def) v = *def;
        out.push_back(v);
      }
      return array(std::move(out));
    }
    fail("Unknown ArrayValue filter: " + f);
  }
  if (operand.is_str()) {
    if (f == "indent") {
      auto [args, kw] = arguments(fargs, env);
      const Value width = pick(args, 0, kw, "width", integer(4));
      if (width.k != K::Int) fail("width must be a number");
      if (width.n < 0) fail("Invalid count value: " + js_number(width.n));
      const bool first = truthy(pick(args, 1, kw, "first", boolean(false)));
      const bool blank = truthy(pick(args, 2, kw, "blank", boolean(false)));
      const std::string& s = operand.str();
      const size_t lines = static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + 1;
      if (width.n * static_cast<double>(lines) + static_cast<double>(s.size()) >
          static_cast<double>(kMaxString))
        check_size(kMaxString + 1);
      const std::string pad(static_cast<size_t>(width.n), ' ');
      std::string out;
      size_t start = 0;
      bool is_first = true;
      while (true) {
        const size_t nl = s.find('\n', start);
        const std::string line =
            s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if (!is_first) out += '\n';
        if (!((!first && is_first) || (!blank && line.empty()))) out += pad;
        out += line;
        is_first = false;
        if (nl == std::string::npos) break;
        start = nl + 1;
      }
      charge(out.size() / 64);
      return string(std::move(out));
    }
    if (f == "replace") {
      auto [args, kw] = arguments(fargs, env);
      args.push_back(object(std::move(kw), K::KwArgs));
      const Value m = string_method("replace", operand);
      return m.f->call(*this, args, env);
    }
    fail("Unknown StringValue filter: " + f);
  }
  if (operand.is_object()) {
    const Value m = object_method(f, operand);
    if (m.k == K::Function) {
      auto [args, kw] = arguments(fargs, env);
      if (!kw.items.empty()) args.push_back(object(std::move(kw), K::KwArgs));
      return m.f->call(*this, args, env);
    }
    fail("Unknown ObjectValue filter: " + f);
  }
  fail("Cannot apply filter \"" + f + "\" to type: " + type_name(operand.k));
}

}  // namespace mixserve::jinja
