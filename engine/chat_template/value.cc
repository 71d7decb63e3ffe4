// Values as @huggingface/jinja's runtime has them: making them, printing them (its toString,
// String(value) and toJSON), truthiness and JavaScript's == and ===, and JSON in.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {

const Value* Object::find(const std::string& key) const {
  if (!index.empty()) {
    const auto it = index.find(key);
    return it == index.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  if (!index.empty()) {
    const auto it = index.find(key);
    if (it != index.end()) {
      items[it->second].second = std::move(v);
      return;
    }
  } else {
    for (auto& [k, old] : items)
      if (k == key) {
        old = std::move(v);
        return;
      }
  }
  items.emplace_back(key, std::move(v));
  if (items.size() >= 16) {
    if (index.empty())
      for (size_t i = 0; i < items.size(); ++i) index.emplace(items[i].first, i);
    else
      index.emplace(key, items.size() - 1);
  }
}

Value undef() {
  return Value{};
}
Value null() {
  Value v;
  v.k = K::Null;
  return v;
}
Value boolean(bool b) {
  Value v;
  v.k = K::Bool;
  v.b = b;
  return v;
}
Value integer(double n) {
  Value v;
  v.k = K::Int;
  v.n = n;
  return v;
}
Value floating(double n) {
  Value v;
  v.k = K::Float;
  v.n = n;
  return v;
}
Value string(std::string s) {
  Value v;
  v.k = K::String;
  v.s = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value array(Array items, K kind) {
  Value v;
  v.k = kind;
  int depth = 0;
  for (const Value& x : items) depth = std::max(depth, x.depth);
  if (depth + 1 > kMaxDepth) fail("nesting limit passed: a list nested more than 256 deep");
  v.depth = depth + 1;
  v.a = std::make_shared<const Array>(std::move(items));
  return v;
}
Value object(Object o, K kind) {
  Value v;
  v.k = kind;
  int depth = 0;
  if (kind != K::Namespace)
    for (const auto& kv : o.items) depth = std::max(depth, kv.second.depth);
  if (depth + 1 > kMaxDepth) fail("nesting limit passed: a dict nested more than 256 deep");
  v.depth = depth + 1;
  v.o = std::make_shared<Object>(std::move(o));
  return v;
}
Value function(std::function<Value(Interp&, std::vector<Value>&, const std::shared_ptr<Env>&)> fn) {
  Value v;
  v.k = K::Function;
  v.f = std::make_shared<const Function>(Function{std::move(fn)});
  return v;
}

const char* type_name(K k) {
  switch (k) {
    case K::Undefined:
      return "UndefinedValue";
    case K::Null:
      return "NullValue";
    case K::Bool:
      return "BooleanValue";
    case K::Int:
      return "IntegerValue";
    case K::Float:
      return "FloatValue";
    case K::String:
      return "StringValue";
    case K::Array:
      return "ArrayValue";
    case K::Tuple:
      return "TupleValue";
    case K::Object:
      return "ObjectValue";
    case K::KwArgs:
      return "KeywordArgumentsValue";
    case K::Namespace:
      return "NamespaceValue";
    case K::Function:
      return "FunctionValue";
  }
  return "?";
}

std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  if (d == 0) return "0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]xx, shortest round trip
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  const int k = static_cast<int>(digits.size());
  const int n = exp + 1;
  std::string out;
  if (k <= n && n <= 21) {
    out = digits + std::string(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out = digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out = "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  } else {
    out = digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += "e";
    out += (n - 1 >= 0 ? "+" : "-") + std::to_string(std::abs(n - 1));
  }
  return sign + out;
}

namespace {

std::string float_display(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && std::fmod(d, 1.0) == 0) {
    if (std::fabs(d) >= 1e21) return js_number(d);
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.1f", d);
    return buf;
  }
  return js_number(d);
}

void to_json_into(std::string& out, const Value& v, const JsonOptions& opt, int depth,
                  bool undefined_as_null) {
  if (depth > kMaxDepth) fail("nesting limit passed: a value nested more than 256 deep");
  switch (v.k) {
    case K::Null:
      out += "null";
      return;
    case K::Undefined:
      out += undefined_as_null ? "null" : "undefined";
      return;
    case K::Int:
    case K::Float:
      out += std::isfinite(v.n) ? js_number(v.n) : "null";
      return;
    case K::Bool:
      out += v.b ? "true" : "false";
      return;
    case K::String:
      out += json_quote(v.str(), opt.ensure_ascii);
      return;
    case K::Function:
      fail("Cannot convert to JSON: FunctionValue");
    case K::Tuple:
      fail("Cannot convert to JSON: TupleValue");
    default:
      break;
  }
  std::string item_sep = ", ", key_sep = ": ";
  if (opt.has_separators) {
    item_sep = opt.item_sep;
    key_sep = opt.key_sep;
  } else if (opt.indent) {
    item_sep = ",";
  }
  if (opt.indent < 0) fail("Invalid count value: " + std::to_string(opt.indent));
  const std::string unit(static_cast<size_t>(opt.indent), ' ');
  std::string base = "\n";
  if (opt.indent)
    for (int i = 0; i < depth; ++i) base += unit;
  const std::string child = base + unit;
  if (out.size() > kMaxString) fail("string limit passed: a string or the output grew past 64 MiB");
  if (v.is_array()) {
    const Array& items = *v.a;
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      if (opt.indent) out += child;
      to_json_into(out, items[i], opt, depth + 1, undefined_as_null);
    }
    if (opt.indent && !items.empty()) out += base;
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& kv : v.o->items) entries.push_back(&kv);
  if (opt.sort_keys)
    std::stable_sort(entries.begin(), entries.end(),
                     [](auto* a, auto* b) { return js_lower(a->first) < js_lower(b->first); });
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += item_sep;
    if (opt.indent) out += child;
    out += json_quote(entries[i]->first, opt.ensure_ascii);
    out += key_sep;
    to_json_into(out, entries[i]->second, opt, depth + 1, undefined_as_null);
  }
  if (opt.indent && !entries.empty()) out += base;
  out += '}';
}

}  // namespace

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  static const char* hex = "0123456789abcdef";
  auto u = [&](uint32_t unit) {
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out += hex[(unit >> sh) & 0xF];
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F))
            u(c);
          else
            out += static_cast<char>(c);
      }
      continue;
    }
    const size_t start = i;
    const uint32_t cp = decode_utf8(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(start, i - start));
    } else if (cp >= 0x10000) {
      u(0xD800 + ((cp - 0x10000) >> 10));
      u(0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      u(cp);
    }
  }
  out += '"';
  return out;
}

std::string to_json(const Value& v, const JsonOptions& opt, bool undefined_as_null) {
  std::string out;
  to_json_into(out, v, opt, 0, undefined_as_null);
  return out;
}

std::string display(const Value& v) {
  switch (v.k) {
    case K::Undefined:
      return "undefined";
    case K::Null:
      return "null";
    case K::Bool:
      return v.b ? "true" : "false";
    case K::Int:
      return js_number(v.n);
    case K::Float:
      return float_display(v.n);
    case K::String:
      return v.str();
    case K::Function:
      fail(
          "printing a macro or function is not supported (the oracle prints its JavaScript "
          "source)");
    default:
      return to_json(v, JsonOptions{}, false);
  }
}

std::string raw_string(const Value& v) {
  switch (v.k) {
    case K::Undefined:
      return "undefined";
    case K::Null:
      return "null";
    case K::Array:
    case K::Tuple: {
      std::string out;
      for (size_t i = 0; i < v.a->size(); ++i) {
        if (i) out += ',';
        out += display((*v.a)[i]);
        if (out.size() > kMaxString)
          fail("string limit passed: a string or the output grew past 64 MiB");
      }
      return out;
    }
    case K::Object:
    case K::KwArgs:
    case K::Namespace:
      return "[object Map]";
    case K::Float:
      return js_number(v.n);
    default:
      return display(v);
  }
}

bool truthy(const Value& v) {
  switch (v.k) {
    case K::Undefined:
    case K::Null:
      return false;
    case K::Bool:
      return v.b;
    case K::Int:
    case K::Float:
      return v.n != 0 && !std::isnan(v.n);
    case K::String:
      return !v.str().empty();
    case K::Array:
    case K::Tuple:
      return !v.a->empty();
    case K::Object:
    case K::KwArgs:
      return !v.o->items.empty();
    case K::Namespace:
    case K::Function:
      return true;
  }
  return false;
}

namespace {
bool is_reference(const Value& v) {
  return v.is_array() || v.is_container() || v.k == K::Function;
}
bool same_reference(const Value& a, const Value& b) {
  if (a.is_array() && b.is_array()) return a.a == b.a;
  if (a.is_container() && b.is_container()) return a.o == b.o;
  if (a.k == K::Function && b.k == K::Function) return a.f == b.f;
  return false;
}
}  // namespace

bool strict_equal(const Value& a, const Value& b) {
  if (is_reference(a) || is_reference(b)) return same_reference(a, b);
  if (a.is_num() && b.is_num()) return a.n == b.n;
  // The oracle's none holds JavaScript's undefined, as undefined does.
  const bool a_nullish = a.k == K::Null || a.k == K::Undefined;
  if (a_nullish || b.k == K::Null || b.k == K::Undefined)
    return a_nullish == (b.k == K::Null || b.k == K::Undefined);
  if (a.k != b.k) return false;
  switch (a.k) {
    case K::Bool:
      return a.b == b.b;
    case K::String:
      return a.str() == b.str();
    default:
      return true;  // null, undefined
  }
}

bool loose_equal(const Value& a, const Value& b) {
  const bool a_nullish = a.k == K::Null || a.k == K::Undefined;
  const bool b_nullish = b.k == K::Null || b.k == K::Undefined;
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (is_reference(a) && is_reference(b)) return same_reference(a, b);
  // One side a primitive: objects become their String(), booleans numbers.
  auto prim = [](const Value& v) { return is_reference(v) ? string(raw_string(v)) : v; };
  const Value x = prim(a), y = prim(b);
  if (x.is_str() && y.is_str()) return x.str() == y.str();
  auto num = [](const Value& v) {
    if (v.k == K::Bool) return v.b ? 1.0 : 0.0;
    if (v.is_str()) return js_to_number(v.str());
    return v.n;
  };
  return num(x) == num(y);
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxDepth) fail("nesting limit passed: a variable nested more than 256 deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return null();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(static_cast<double>(j.get<int64_t>()));
    case nlohmann::ordered_json::value_t::number_unsigned:
      return integer(static_cast<double>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = j.get<double>();
      return std::isfinite(d) && std::fmod(d, 1.0) == 0 ? integer(d) : floating(d);
    }
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      if (j.size() > kMaxItems) fail("list limit passed: a list or dict grew past 1000000 items");
      Array items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1));
      return array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      if (j.size() > kMaxItems) fail("list limit passed: a list or dict grew past 1000000 items");
      // JavaScript objects list integer-like keys first, ascending, then the others in order.
      auto index_key = [](const std::string& k, double& v) {
        if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
        for (char c : k)
          if (c < '0' || c > '9') return false;
        v = std::strtod(k.c_str(), nullptr);
        return v <= 4294967294.0;
      };
      std::vector<std::pair<double, nlohmann::ordered_json::const_iterator>> numeric;
      for (auto it = j.begin(); it != j.end(); ++it) {
        double v;
        if (index_key(it.key(), v)) numeric.emplace_back(v, it);
      }
      std::stable_sort(numeric.begin(), numeric.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      Object o;
      for (const auto& [v, it] : numeric) o.set(it.key(), from_json(it.value(), depth + 1));
      for (auto it = j.begin(); it != j.end(); ++it) {
        double v;
        if (!index_key(it.key(), v)) o.set(it.key(), from_json(it.value(), depth + 1));
      }
      return object(std::move(o));
    }
    default:
      fail("unsupported JSON value (binary)");
  }
}

}  // namespace mixserve::jinja
