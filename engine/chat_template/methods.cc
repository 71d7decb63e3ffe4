// The methods of strings and dicts ('abc'.upper(), d.items(), d.get(k, default), ...), member
// access and the comparison that sort and dictsort use, as @huggingface/jinja's runtime has them.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
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

namespace {

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
    const int r = compare_values((*a.a)[idx], (*b.a)[idx], cs.b);
    return rev.b ? r > 0 : r < 0;
  });
  return array(std::move(items));
}

}  // namespace

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
      // charAt(0): half of an astral code point, which no case mapping changes.
      if (decode_utf8(*sp, i) >= 0x10000) return string(*sp);
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

}  // namespace mixserve::jinja
