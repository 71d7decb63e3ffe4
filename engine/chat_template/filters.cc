// Filters, tests and the methods of strings and dicts, as @huggingface/jinja's runtime has them
// (the same names, the same argument rules, the same errors where it has them).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {
namespace {

int compare(const Value& a, const Value& b, bool case_sensitive) {
  if (a.k == K::Null && b.k == K::Null) return 0;
  if (a.k == K::Null || b.k == K::Null)
    fail(std::string("Cannot compare ") + type_name(a.k) + " with " + type_name(b.k));
  if (a.k == K::Undefined && b.k == K::Undefined) return 0;
  if (a.k == K::Undefined || b.k == K::Undefined)
    fail(std::string("Cannot compare ") + type_name(a.k) + " with " + type_name(b.k));
  auto numeric = [](const Value& v) { return v.is_num() || v.k == K::Bool; };
  if (numeric(a) && numeric(b)) {
    const double x = a.k == K::Bool ? a.b : a.n, y = b.k == K::Bool ? b.b : b.n;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.k != b.k)
    fail(std::string("Cannot compare different types: ") + type_name(a.k) + " and " +
         type_name(b.k));
  if (a.is_str()) {
    const std::string x = case_sensitive ? a.str() : js_lower(a.str());
    const std::string y = case_sensitive ? b.str() : js_lower(b.str());
    return x < y ? -1 : x > y ? 1 : 0;
  }
  fail(std::string("Cannot compare type: ") + type_name(a.k));
}

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
Value pick(const std::vector<Value>& args, size_t i, const Object& kw, const char* name,
           Value def) {
  if (const Value* v = arg_at(args, i)) return *v;
  if (const Value* v = kw.find(name)) return *v;
  return def;
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
      const int r = compare(a.first, b.first, case_sensitive);
      return reverse ? r > 0 : r < 0;
    });
    for (size_t i = 0; i < pairs.size(); ++i) out[i] = pairs[i].second;
    return array(std::move(out));
  }
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    const int r = compare(a, b, case_sensitive);
    return reverse ? r > 0 : r < 0;
  });
  return array(std::move(out));
}

Value dictsort(Interp& in, const Object& o, std::vector<Value> args) {
  Object kw;
  std::vector<Value> positional;
  for (Value& a : args) {
    if (a.k == K::KwArgs)
      kw = *a.o;
    else
      positional.push_back(a);
  }
  const Value cs = pick(positional, 0, kw, "case_sensitive", boolean(false));
  if (cs.k != K::Bool) fail("case_sensitive must be a boolean");
  const Value by = pick(positional, 1, kw, "by", string("key"));
  if (!by.is_str()) fail("by must be a string");
  if (by.str() != "key" && by.str() != "value") fail("by must be either 'key' or 'value'");
  const Value rev = pick(positional, 2, kw, "reverse", boolean(false));
  if (rev.k != K::Bool) fail("reverse must be a boolean");
  in.charge(o.items.size() * 4);
  Array items;
  for (const auto& [k, v] : o.items) items.push_back(array({string(k), v}));
  const size_t idx = by.str() == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int r = compare((*a.a)[idx], (*b.a)[idx], cs.b);
    return rev.b ? r > 0 : r < 0;
  });
  return array(std::move(items));
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

Value object_items(const Object& o) {
  Array items;
  for (const auto& [k, v] : o.items) items.push_back(array({string(k), v}));
  return array(std::move(items));
}

Value string_method(const std::string& name, const Value& self) {
  const std::shared_ptr<const std::string> sp = self.s;
  auto fn = [](auto body) { return function(body); };
  if (name == "length") return integer(static_cast<double>(utf16_length(*sp)));
  if (name == "upper")
    return fn([sp](Interp&, std::vector<Value>&, const EnvP&) { return string(js_upper(*sp)); });
  if (name == "lower")
    return fn([sp](Interp&, std::vector<Value>&, const EnvP&) { return string(js_lower(*sp)); });
  if (name == "strip")
    return fn([sp](Interp&, std::vector<Value>&, const EnvP&) {
      return string(js_trim(*sp, true, true));
    });
  if (name == "lstrip")
    return fn([sp](Interp&, std::vector<Value>&, const EnvP&) {
      return string(js_trim(*sp, true, false));
    });
  if (name == "rstrip")
    return fn([sp](Interp&, std::vector<Value>&, const EnvP&) {
      return string(js_trim(*sp, false, true));
    });
  if (name == "title")
    return fn([sp](Interp&, std::vector<Value>&, const EnvP&) { return string(title_case(*sp)); });
  if (name == "capitalize")
    return fn([sp](Interp&, std::vector<Value>&, const EnvP&) {
      if (sp->empty()) return string("");
      size_t i = 0;
      decode_utf8(*sp, i);
      return string(js_upper(sp->substr(0, i)) + sp->substr(i));
    });
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return fn([sp, starts, name](Interp&, std::vector<Value>& args, const EnvP&) {
      if (args.empty()) fail(name + "() requires at least one argument");
      auto test = [&](const std::string& p) {
        if (p.size() > sp->size()) return false;
        return starts ? sp->compare(0, p.size(), p) == 0
                      : sp->compare(sp->size() - p.size(), p.size(), p) == 0;
      };
      if (args[0].is_str()) return boolean(test(args[0].str()));
      if (args[0].is_array()) {
        for (const Value& x : *args[0].a) {
          if (!x.is_str()) fail(name + "() tuple elements must be strings");
          if (test(x.str())) return boolean(true);
        }
        return boolean(false);
      }
      fail(name + "() argument must be a string or tuple of strings");
    });
  }
  if (name == "split")
    return fn([sp](Interp& in, std::vector<Value>& args, const EnvP&) {
      const Value sep = args.size() > 0 ? args[0] : null();
      if (!sep.is_str() && sep.k != K::Null) fail("sep argument must be a string or null");
      const Value maxsplit = args.size() > 1 ? args[1] : integer(-1);
      if (maxsplit.k != K::Int) fail("maxsplit argument must be a number");
      const double max = maxsplit.n;
      std::vector<std::string> parts;
      if (sep.k == K::Null) {
        const std::string text = js_trim(*sp, true, false);
        size_t i = 0;
        while (i < text.size()) {
          size_t j = i, len;
          // skip whitespace
          while (j < text.size()) {
            size_t k = j;
            if (!js_space(decode_utf8(text, k))) break;
            j = k;
          }
          if (j >= text.size()) break;
          size_t e = j;
          while (e < text.size()) {
            size_t k = e;
            if (js_space(decode_utf8(text, k))) break;
            e = k;
          }
          len = e - j;
          if (max != -1 && static_cast<double>(parts.size()) >= max) {
            parts.push_back(text.substr(j));
            break;
          }
          parts.push_back(text.substr(j, len));
          i = e;
        }
      } else {
        const std::string& s = sep.str();
        if (s.empty()) fail("empty separator");
        size_t i = 0;
        while (true) {
          const size_t hit = sp->find(s, i);
          if (hit == std::string::npos) break;
          parts.push_back(sp->substr(i, hit - i));
          i = hit + s.size();
          in.check_items(parts.size());
        }
        parts.push_back(sp->substr(i));
        if (max != -1 && static_cast<double>(parts.size()) > max) {
          const size_t keep = max < 0 ? 0 : static_cast<size_t>(max);
          std::string rest;
          // JavaScript's splice with a negative start counts from the end.
          size_t from = keep;
          if (max < 0)
            from = parts.size() >= static_cast<size_t>(-max)
                       ? parts.size() - static_cast<size_t>(-max)
                       : 0;
          for (size_t k = from; k < parts.size(); ++k) rest += (k > from ? s : "") + parts[k];
          parts.resize(from);
          parts.push_back(rest);
        }
      }
      in.charge(parts.size());
      in.check_items(parts.size());
      Array out;
      for (auto& p : parts) out.push_back(string(std::move(p)));
      return array(std::move(out));
    });
  if (name == "replace")
    return fn([sp](Interp& in, std::vector<Value>& args, const EnvP&) {
      if (args.size() < 2) fail("replace() requires at least two arguments");
      if (!args[0].is_str() || !args[1].is_str()) fail("replace() arguments must be strings");
      Value count = null();
      if (args.size() > 2) {
        if (args[2].k == K::KwArgs) {
          const Value* c = args[2].o->find("count");
          count = c ? *c : null();
        } else {
          count = args[2];
        }
      }
      if (count.k != K::Int && count.k != K::Null)
        fail("replace() count argument must be a number or null");
      const std::string& to = args[1].str();
      // Bound the result before building it.
      const size_t hits =
          args[0].str().empty() ? sp->size() + 1 : sp->size() / args[0].str().size() + 1;
      if (to.size() > 0 && hits > kMaxString / to.size()) {
        const double c = count.k == K::Int ? count.n : -1;
        if (c < 0 || c * static_cast<double>(to.size()) > static_cast<double>(kMaxString))
          in.check_size(sp->size() + hits * to.size());
      }
      std::string r = js_replace(*sp, args[0].str(), to, count.k == K::Int ? count.n : NAN);
      in.check_size(r.size());
      in.charge(r.size() / 64);
      return string(std::move(r));
    });
  return undef();
}

Value object_method(const std::string& name, const Value& self) {
  const std::shared_ptr<Object> o = self.o;
  if (name == "get")
    return function([o](Interp&, std::vector<Value>& args, const EnvP&) {
      if (args.empty()) fail("Object key must be a string: got undefined");
      if (!args[0].is_str())
        fail(std::string("Object key must be a string: got ") + type_name(args[0].k));
      if (const Value* v = o->find(args[0].str())) return *v;
      return args.size() > 1 ? args[1] : null();
    });
  if (name == "items")
    return function([o](Interp& in, std::vector<Value>&, const EnvP&) {
      in.charge(o->items.size());
      return object_items(*o);
    });
  if (name == "keys")
    return function([o](Interp& in, std::vector<Value>&, const EnvP&) {
      in.charge(o->items.size());
      Array keys;
      for (const auto& kv : o->items) keys.push_back(string(kv.first));
      return array(std::move(keys));
    });
  if (name == "values")
    return function([o](Interp& in, std::vector<Value>&, const EnvP&) {
      in.charge(o->items.size());
      Array values;
      for (const auto& kv : o->items) values.push_back(kv.second);
      return array(std::move(values));
    });
  if (name == "dictsort")
    return function(
        [o](Interp& in, std::vector<Value>& args, const EnvP&) { return dictsort(in, *o, args); });
  return undef();
}

}  // namespace

Value Interp::member(const Value& object, const Value& property) {
  if (object.is_container()) {
    if (!property.is_str())
      fail(std::string("Cannot access property with non-string: got ") + type_name(property.k));
    if (const Value* v = object.o->find(property.str())) return *v;
    if (object.is_object()) return object_method(property.str(), object);
    return undef();
  }
  if (object.is_array() || object.is_str()) {
    if (property.k == K::Int) {
      double i = property.n;
      if (object.is_array()) {
        const double n = static_cast<double>(object.a->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undef();
        return (*object.a)[static_cast<size_t>(i)];
      }
      const double n = static_cast<double>(utf16_length(object.str()));
      if (i < 0) i += n;
      if (i < 0 || i >= n) return undef();
      // The UTF-16 unit at i: half of a surrogate pair prints as U+FFFD here.
      double unit = 0;
      const std::string& s = object.str();
      for (size_t p = 0; p < s.size();) {
        const size_t start = p;
        const uint32_t cp = decode_utf8(s, p);
        const double w = cp >= 0x10000 ? 2 : 1;
        if (i < unit + w)
          return string(w == 2 ? std::string("\xEF\xBF\xBD") : s.substr(start, p - start));
        unit += w;
      }
      return undef();
    }
    if (property.is_str()) {
      if (object.is_array()) {
        if (property.str() == "length") return integer(static_cast<double>(object.a->size()));
        return undef();
      }
      return string_method(property.str(), object);
    }
    fail(std::string("Cannot access property with non-string/non-number: got ") +
         type_name(property.k));
  }
  if (!property.is_str())
    fail(std::string("Cannot access property with non-string: got ") + type_name(property.k));
  return undef();
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
    if (!arg) return strict_equal(v, undef());
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
    const Value indent = pick({}, 0, kw, "indent", null());
    if (indent.k != K::Int && indent.k != K::Null) fail("If set, indent must be a number");
    if (indent.k == K::Int) {
      if (indent.n < 0) fail("Invalid count value: " + js_number(indent.n));
      if (indent.n > 1000) fail("indent limit passed: tojson indent above 1000");
      opt.indent = static_cast<int>(indent.n);
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
