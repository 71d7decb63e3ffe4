// ChatTemplate: parse once, render many times; each render has its own interpreter and the
// oracle's globals (namespace, range, raise_exception, strftime_now, true/false/none and their
// capitalised spellings).
#include "engine/chat_template.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve {

using namespace jinja;

struct ChatTemplate::Impl {
  std::string source;
  NodeP program;
};

namespace {

// String(x) of a JavaScript value passed to a host function (raise_exception's message).
std::string message_of(const std::vector<Value>& args) {
  if (args.empty()) return "";
  const Value& v = args[0];
  if (v.k == K::Undefined || v.k == K::Null) return "";  // none's raw value is undefined too
  return raw_string(v);
}

// Number(x) of a value's raw JavaScript value, as the oracle's range() compares them.
double to_number(const Value& v) {
  switch (v.k) {
    case K::Int:
    case K::Float:
      return v.n;
    case K::Bool:
      return v.b ? 1 : 0;
    case K::Null:
      return 0;
    case K::String:
      return js_to_number(v.str());
    case K::Array:
    case K::Tuple:
      return js_to_number(raw_string(v));
    default:
      return NAN;
  }
}

Value range_of(Interp& in, std::vector<Value>& args) {
  double start = 0, stop = args.empty() ? NAN : to_number(args[0]), step = 1;
  if (args.size() >= 2 && args[1].k != K::Undefined) {
    start = stop;
    stop = to_number(args[1]);
  }
  if (args.size() >= 3 && args[2].k != K::Undefined) step = to_number(args[2]);
  if (step == 0) fail("range() step must not be zero");
  if (std::isnan(start) || std::isnan(stop)) return array({});
  auto number = [](double x) { return std::fmod(x, 1.0) == 0 ? integer(x) : floating(x); };
  // One step, then none: a NaN or infinite step (the oracle's loop compares before adding).
  if (std::isnan(step) || std::isinf(step)) {
    const bool first = step > 0 ? start < stop : start > stop;
    return array(first ? Array{number(start)} : Array{});
  }
  const double count =
      step > 0 ? std::ceil((stop - start) / step) : std::ceil((start - stop) / -step);
  if (count > static_cast<double>(kMaxItems))
    fail("range limit passed: range() of more than 1000000 numbers");
  in.charge(static_cast<size_t>(std::max(count, 0.0)) * 4);
  Array out;
  out.reserve(static_cast<size_t>(std::max(count, 0.0)));
  for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(number(i));
    if (out.size() > kMaxItems) fail("range limit passed: range() of more than 1000000 numbers");
  }
  return array(std::move(out));
}

Value namespace_of(Interp& in, std::vector<Value>& args) {
  std::vector<Value> positional = args;
  Object kwargs;
  bool has_kwargs = false;
  if (!positional.empty() && positional.back().k == K::KwArgs) {
    kwargs = *positional.back().o;
    positional.pop_back();
    has_kwargs = true;
  }
  if (positional.size() > 1)
    fail("namespace expected at most 1 argument, got " + std::to_string(positional.size()));
  Object entries;
  if (positional.size() == 1) {
    const Value& source = positional[0];
    if (source.is_object()) {
      for (const auto& [k, v] : source.o->items) entries.set(k, v);
    } else if (source.is_array()) {
      for (const Value& pair : *source.a) {
        std::vector<Value> kv;
        if (pair.is_array())
          kv = *pair.a;
        else if (pair.is_str())
          for (auto& c : code_points(pair.str())) kv.push_back(string(c));
        if (kv.size() != 2)
          fail("namespace expected an object or an iterable of [key, value] pairs");
        if (!kv[0].is_str()) fail("namespace keys must be strings");
        entries.set(kv[0].str(), kv[1]);
      }
    } else {
      fail(std::string("'") + type_name(source.k) + "' object is not iterable");
    }
  }
  if (has_kwargs)
    for (const auto& [k, v] : kwargs.items) entries.set(k, v);
  Value ns = object(std::move(entries), K::Namespace);
  in.namespaces.push_back(ns.o);
  in.charge(ns.o->items.size() + 1);
  return ns;
}

std::string render_impl(const Node& program, const nlohmann::ordered_json& variables) {
  if (!variables.is_object() && !variables.is_null())
    throw ChatTemplateError("the template's variables must be a JSON object");
  Interp in;
  auto env = std::make_shared<Env>();
  auto& vars = env->vars;
  vars["namespace"] =
      function([](Interp& i, std::vector<Value>& a, const EnvP&) { return namespace_of(i, a); });
  vars["false"] = boolean(false);
  vars["true"] = boolean(true);
  vars["none"] = null();
  vars["raise_exception"] = function([](Interp&, std::vector<Value>& a, const EnvP&) -> Value {
    throw ChatTemplateError(message_of(a));
  });
  vars["range"] =
      function([](Interp& i, std::vector<Value>& a, const EnvP&) { return range_of(i, a); });
  vars["strftime_now"] = function([](Interp&, std::vector<Value>& a, const EnvP&) {
    if (a.empty() || !a[0].is_str()) fail("strftime_now() needs a format string");
    return string(strftime_now(a[0].str()));
  });
  vars["True"] = boolean(true);
  vars["False"] = boolean(false);
  vars["None"] = null();
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) {
      if (vars.count(it.key())) fail("Variable already declared: " + it.key());
      vars[it.key()] = from_json(it.value());
    }
  }
  try {
    return in.eval(program, env).str();
  } catch (const BreakSignal&) {
    fail("`break` outside a loop");
  } catch (const ContinueSignal&) {
    fail("`continue` outside a loop");
  }
}

std::string render_with(const Node& program, const nlohmann::ordered_json& variables) {
  try {
    return render_impl(program, variables);
  } catch (const ChatTemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw ChatTemplateError("out of memory while rendering");
  } catch (const std::exception& e) {
    throw ChatTemplateError(std::string("internal error while rendering: ") + e.what());
  }
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source) : impl_(std::make_unique<Impl>()) {
  impl_->source = source;
  try {
    impl_->program = parse(impl_->source, tokenize(impl_->source));
  } catch (const ChatTemplateError&) {
    throw;
  } catch (const std::exception& e) {
    throw ChatTemplateError(std::string("line 1, column 1: cannot parse the template: ") +
                            e.what());
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  return render_with(*impl_->program, variables);
}

std::string ChatTemplate::render(const nlohmann::json& variables) const {
  return render_with(*impl_->program, nlohmann::ordered_json(variables));
}

}  // namespace mixserve
