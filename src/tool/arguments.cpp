#include "tool/arguments.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "clienttool/schema.hpp"
#include "util/text.hpp"

namespace sb::tool {

namespace {

using clienttool::CompiledSchema;

constexpr int kMaxDepth = 32;  // of $ref and combinator chasing, so a cyclic schema terminates

// "#/$defs/x" inside the tool's own schema; anything else is left to valijson.
const json::value* resolve_ref(const json::value& root, std::string_view ref) {
  if (ref == "#") return &root;
  if (ref.size() < 2 || ref.substr(0, 2) != "#/") return nullptr;
  json::error_code ec;
  const json::value* found = root.find_pointer(ref.substr(1), ec);
  return ec ? nullptr : found;
}

// The schema itself and the alternatives it offers (allOf / anyOf / oneOf members), with local
// $refs followed: what a value at this place may be checked against.
void flatten(const json::value& root, const json::value& schema,
             std::vector<const json::object*>& out, int depth = 0) {
  if (depth > kMaxDepth || !schema.is_object()) return;
  const json::object& obj = schema.get_object();
  if (auto it = obj.find("$ref"); it != obj.end() && it->value().is_string()) {
    if (const json::value* target = resolve_ref(root, it->value().get_string()))
      flatten(root, *target, out, depth + 1);
  }
  out.push_back(&obj);
  for (std::string_view key : {"allOf", "anyOf", "oneOf"}) {
    if (auto it = obj.find(key); it != obj.end() && it->value().is_array())
      for (const json::value& member : it->value().get_array())
        flatten(root, member, out, depth + 1);
  }
}

// The kinds a set of alternatives allows; `any` when one of them does not restrict the type.
struct Allowed {
  std::set<std::string, std::less<>> types;
  bool any = false;
  bool has(std::string_view t) const {
    return any || types.count(t) > 0 || (t == "integer" && types.count("number") > 0);
  }
};

Allowed allowed_types(const std::vector<const json::object*>& schemas) {
  Allowed out;
  bool restricted = false;
  for (const json::object* s : schemas) {
    if (auto it = s->find("type"); it != s->end()) {
      restricted = true;
      if (it->value().is_string()) out.types.emplace(it->value().get_string());
      if (it->value().is_array())
        for (const json::value& t : it->value().get_array())
          if (t.is_string()) out.types.emplace(t.get_string());
      continue;
    }
    // Without "type", the keywords still say what the author meant.
    if (s->contains("properties") || s->contains("required") ||
        s->contains("additionalProperties")) {
      restricted = true;
      out.types.emplace("object");
    }
    if (s->contains("items") || s->contains("prefixItems")) {
      restricted = true;
      out.types.emplace("array");
    }
    for (std::string_view key : {"enum", "const"}) {
      auto it = s->find(key);
      if (it == s->end()) continue;
      restricted = true;
      if (key == "const") {
        out.types.emplace(schema_type_name(it->value()));
      } else if (it->value().is_array()) {
        for (const json::value& e : it->value().get_array())
          out.types.emplace(schema_type_name(e));
      }
    }
  }
  // Only the combinator wrappers (an anyOf holder has no type of its own) restrict nothing by
  // themselves; a schema list in which nobody restricts the type allows anything.
  if (!restricted) out.any = true;
  return out;
}

// A JSON-style number literal and nothing else ("12", "-3.5", "1e3"; not "0x10", "nan", "1,5").
std::optional<json::value> parse_number(const std::string& text, bool want_integer) {
  if (text.empty()) return std::nullopt;
  for (char c : text)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' ||
          c == 'e' || c == 'E'))
      return std::nullopt;
  std::int64_t i = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
  if (ec == std::errc() && end == text.data() + text.size()) return json::value(i);
  char* stop = nullptr;
  double d = std::strtod(text.c_str(), &stop);
  if (stop != text.c_str() + text.size() || !std::isfinite(d)) return std::nullopt;
  if (want_integer) {
    if (d != std::floor(d) || d < -9.2e18 || d > 9.2e18) return std::nullopt;
    return json::value(static_cast<std::int64_t>(d));
  }
  return json::value(d);
}

// Replaces a string that stands for another kind of value by that value. True when changed.
bool coerce_string(json::value& value, const Allowed& allowed) {
  std::string text(trim(value.get_string()));
  if ((allowed.has("array") || allowed.has("object")) && !text.empty() &&
      (text.front() == '[' || text.front() == '{')) {
    if (auto parsed = parse_json(text); parsed) {
      if ((parsed->is_array() && allowed.has("array")) ||
          (parsed->is_object() && allowed.has("object"))) {
        value = std::move(*parsed);
        return true;
      }
    }
  }
  if (allowed.has("integer") || allowed.has("number")) {
    bool want_integer = !allowed.types.count("number");
    if (auto n = parse_number(text, want_integer)) {
      value = std::move(*n);
      return true;
    }
  }
  if (allowed.has("boolean")) {
    std::string l = ascii_lower(text);
    if (l == "true" || l == "false") {
      value = l == "true";
      return true;
    }
  }
  if (allowed.has("null") && ascii_lower(text) == "null") {
    value = nullptr;
    return true;
  }
  return false;
}

std::string number_text(const json::value& v) {
  if (v.is_double()) {
    double d = v.get_double();
    if (d == std::floor(d) && std::fabs(d) < 1e15)
      return std::to_string(static_cast<std::int64_t>(d));
  }
  return json::serialize(v);
}

// Walks `value` with the schemas that apply to it and repairs what coerce_string (and the
// number-to-string rule) can. True when anything changed.
bool coerce(const json::value& root, const std::vector<const json::value*>& schemas,
            json::value& value, int depth = 0) {
  if (depth > kMaxDepth) return false;
  std::vector<const json::object*> flat;
  for (const json::value* s : schemas)
    flatten(root, *s, flat);
  if (flat.empty()) return false;
  Allowed allowed = allowed_types(flat);

  bool changed = false;
  if (value.is_string() && !allowed.any && !allowed.has("string")) {
    changed = coerce_string(value, allowed);
  } else if ((value.is_number() || value.is_bool()) && !allowed.any && allowed.types.size() == 1 &&
             allowed.has("string")) {
    value = value.is_bool() ? json::value(value.get_bool() ? "true" : "false")
                            : json::value(number_text(value));
    return true;
  } else if (value.is_double() && !allowed.any && allowed.types.count("integer") &&
             !allowed.types.count("number")) {
    // 10.0 is an integer to a person; valijson's "integer" wants an integer-typed value.
    double d = value.get_double();
    if (d == std::floor(d) && std::fabs(d) < 9.2e18) {
      value = static_cast<std::int64_t>(d);
      return true;
    }
  }

  if (value.is_object()) {
    for (auto& [key, member] : value.get_object()) {
      std::vector<const json::value*> sub;
      for (const json::object* s : flat) {
        const json::value* props = s->if_contains("properties");
        const json::value* p =
            props && props->is_object() ? props->get_object().if_contains(key) : nullptr;
        if (p) {
          sub.push_back(p);
        } else if (const json::value* extra = s->if_contains("additionalProperties");
                   extra && extra->is_object()) {
          sub.push_back(extra);
        }
      }
      if (!sub.empty() && coerce(root, sub, member, depth + 1)) changed = true;
    }
  } else if (value.is_array()) {
    json::array& items = value.get_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      std::vector<const json::value*> sub;
      for (const json::object* s : flat) {
        const json::value* prefix = s->if_contains("prefixItems");
        const json::value* it = s->if_contains("items");
        if (prefix && prefix->is_array() && i < prefix->get_array().size()) {
          sub.push_back(&prefix->get_array()[i]);
        } else if (it && it->is_array()) {  // draft-04 tuple form
          if (i < it->get_array().size()) sub.push_back(&it->get_array()[i]);
        } else if (it && it->is_object()) {
          sub.push_back(it);
        }
      }
      if (!sub.empty() && coerce(root, sub, items[i], depth + 1)) changed = true;
    }
  }
  return changed;
}

// --- messages ----------------------------------------------------------------------------------

std::string shown(const std::string& path) {
  return path.empty() ? "the arguments" : path;
}

std::string preview(const json::value& v) {
  std::string text = json::serialize(v);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// "the string \"abc\"", "the number 5", "an object", "null"
std::string describe(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return std::string("the boolean ") + (v.get_bool() ? "true" : "false");
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "the number " + preview(v);
    case json::kind::string:
      return "the string " + preview(v);
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value";
}

std::string with_article(std::string_view type) {
  if (type == "integer" || type == "object" || type == "array") return "an " + std::string(type);
  if (type == "null") return "null";
  return "a " + std::string(type);
}

// "an integer", "a string or null"
std::string expected_types(const json::object& schema) {
  std::vector<std::string> names;
  const json::value& t = schema.at("type");
  if (t.is_string()) names.push_back(with_article(t.get_string()));
  if (t.is_array())
    for (const json::value& e : t.get_array())
      if (e.is_string()) names.push_back(with_article(e.get_string()));
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

bool matches_type(const json::value& v, std::string_view type) {
  if (type == "integer") {
    if (v.is_int64() || v.is_uint64()) return true;
    return v.is_double() && v.get_double() == std::floor(v.get_double());
  }
  if (type == "number") return v.is_number();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_bool();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "null") return v.is_null();
  return true;
}

bool type_ok(const json::value& v, const json::value& type) {
  if (type.is_string()) return matches_type(v, type.get_string());
  if (type.is_array()) {
    for (const json::value& t : type.get_array())
      if (t.is_string() && matches_type(v, t.get_string())) return true;
    return false;
  }
  return true;
}

double as_double(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  return v.get_double();
}

bool json_equal(const json::value& a, const json::value& b) {
  if (a.is_number() && b.is_number()) return as_double(a) == as_double(b);
  return a == b;
}

// What a missing property should be, for the hint: "a string: The absolute path to the file".
std::string property_hint(const json::value& root, const json::value& schema) {
  std::vector<const json::object*> flat;
  flatten(root, schema, flat);
  std::string type, description;
  for (const json::object* s : flat) {
    if (type.empty() && s->contains("type")) type = expected_types(*s);
    if (description.empty())
      if (const json::value* d = s->if_contains("description"); d && d->is_string())
        description = std::string(d->get_string());
  }
  if (description.size() > 200) description = description.substr(0, 197) + "...";
  if (type.empty() && description.empty()) return "";
  if (description.empty()) return " (" + type + ")";
  if (type.empty()) return " (" + description + ")";
  return " (" + type + ": " + description + ")";
}

// Finds the violations this code can explain in plain words: wrong type, missing property,
// value outside an enum, unexpected property, bounds. anyOf/oneOf/pattern and the rest are left
// to valijson's message.
class Explainer {
 public:
  explicit Explainer(const json::value& root) : root_(root) {}

  void check(const json::value& schema, const json::value& value, const std::string& path,
             int depth = 0) {
    if (depth > kMaxDepth || issues_.size() >= kMaxIssues) return;
    if (schema.is_bool()) {
      if (!schema.get_bool()) add(shown(path) + " is not allowed here");
      return;
    }
    if (!schema.is_object()) return;
    const json::object& s = schema.get_object();
    if (const json::value* ref = s.if_contains("$ref"); ref && ref->is_string()) {
      if (const json::value* target = resolve_ref(root_, ref->get_string()))
        check(*target, value, path, depth + 1);
    }
    if (const json::value* all = s.if_contains("allOf"); all && all->is_array())
      for (const json::value& member : all->get_array())
        check(member, value, path, depth + 1);

    if (const json::value* type = s.if_contains("type"); type && !type_ok(value, *type)) {
      add(shown(path) + " must be " + expected_types(s) + ", got " + describe(value));
      return;  // what is inside a value of the wrong kind does not matter yet
    }
    if (const json::value* e = s.if_contains("enum"); e && e->is_array()) {
      bool found = false;
      for (const json::value& option : e->get_array())
        found = found || json_equal(option, value);
      if (!found) {
        std::string options;
        for (const json::value& option : e->get_array())
          options += (options.empty() ? "" : ", ") + json::serialize(option);
        add(shown(path) + " must be one of " + options + ", got " + describe(value));
        return;
      }
    }
    if (const json::value* c = s.if_contains("const"); c && !json_equal(*c, value)) {
      add(shown(path) + " must be exactly " + preview(*c) + ", got " + describe(value));
      return;
    }
    if (value.is_number()) check_bounds(s, value, path);
    if (value.is_string()) check_length(s, value.get_string().size(), path);
    if (value.is_object()) check_object(s, value.get_object(), path, depth);
    if (value.is_array()) check_array(s, value.get_array(), path, depth);
  }

  const std::vector<std::string>& issues() const { return issues_; }

 private:
  static constexpr std::size_t kMaxIssues = 8;

  void add(std::string issue) {
    if (issues_.size() < kMaxIssues) issues_.push_back(std::move(issue));
  }

  void check_bounds(const json::object& s, const json::value& value, const std::string& path) {
    double v = as_double(value);
    auto bound = [&](std::string_view key) -> std::optional<double> {
      const json::value* b = s.if_contains(key);
      if (!b || !b->is_number()) return std::nullopt;
      return as_double(*b);
    };
    if (auto min = bound("minimum"); min && v < *min)
      add(shown(path) + " must be at least " + json::serialize(s.at("minimum")) + ", got " +
          preview(value));
    if (auto max = bound("maximum"); max && v > *max)
      add(shown(path) + " must be at most " + json::serialize(s.at("maximum")) + ", got " +
          preview(value));
    if (auto min = bound("exclusiveMinimum"); min && v <= *min)
      add(shown(path) + " must be greater than " + json::serialize(s.at("exclusiveMinimum")) +
          ", got " + preview(value));
    if (auto max = bound("exclusiveMaximum"); max && v >= *max)
      add(shown(path) + " must be less than " + json::serialize(s.at("exclusiveMaximum")) +
          ", got " + preview(value));
  }

  // Counted in bytes for strings: only an approximation of characters, so only the clear cases
  // (empty where a minimum of 1 is wanted) are reported here; the rest goes to valijson.
  void check_length(const json::object& s, std::size_t size, const std::string& path) {
    if (const json::value* min = s.if_contains("minLength");
        min && min->is_number() && size == 0 && as_double(*min) > 0)
      add(shown(path) + " must not be empty");
  }

  void check_object(const json::object& s, const json::object& value, const std::string& path,
                    int depth) {
    const json::object* props = nullptr;
    if (const json::value* p = s.if_contains("properties"); p && p->is_object())
      props = &p->get_object();
    if (const json::value* req = s.if_contains("required"); req && req->is_array()) {
      for (const json::value& name : req->get_array()) {
        if (!name.is_string() || value.contains(name.get_string())) continue;
        std::string hint;
        if (props)
          if (const json::value* p = props->if_contains(name.get_string()))
            hint = property_hint(root_, *p);
        add(path + "/" + escape_pointer_token(name.get_string()) + " is required" + hint);
      }
    }
    const json::value* extra = s.if_contains("additionalProperties");
    for (const auto& [key, member] : value) {
      std::string sub = path + "/" + escape_pointer_token(key);
      if (props)
        if (const json::value* p = props->if_contains(key)) {
          check(*p, member, sub, depth + 1);
          continue;
        }
      if (extra && extra->is_bool() && !extra->get_bool()) {
        std::string names;
        if (props)
          for (const auto& [name, unused] : *props)
            names += (names.empty() ? "" : ", ") + std::string(name);
        add(sub + " is not a parameter of this tool" +
            (names.empty() ? std::string() : "; the parameters are: " + names));
      } else if (extra && extra->is_object()) {
        check(*extra, member, sub, depth + 1);
      }
    }
  }

  void check_array(const json::object& s, const json::array& value, const std::string& path,
                   int depth) {
    if (const json::value* min = s.if_contains("minItems");
        min && min->is_number() && static_cast<double>(value.size()) < as_double(*min))
      add(shown(path) + " must have at least " + json::serialize(*min) + " items, got " +
          std::to_string(value.size()));
    if (const json::value* max = s.if_contains("maxItems");
        max && max->is_number() && static_cast<double>(value.size()) > as_double(*max))
      add(shown(path) + " must have at most " + json::serialize(*max) + " items, got " +
          std::to_string(value.size()));
    const json::value* items = s.if_contains("items");
    if (!items || !items->is_object()) return;
    for (std::size_t i = 0; i < value.size(); ++i)
      check(*items, value[i], path + "/" + std::to_string(i), depth + 1);
  }

  const json::value& root_;
  std::vector<std::string> issues_;
};

Error invalid(const Tool& tool, const std::string& detail) {
  return make_error(ErrorCode::InvalidRequest,
                    "the " + tool.id() + " tool was called with invalid arguments: " + detail);
}

}  // namespace

Result<json::object> prepare_arguments(const Tool& tool, json::value args) {
  // Some models send the whole argument object as a JSON string, or nothing for a tool that
  // takes no parameters.
  if (args.is_null()) args = json::object{};
  if (args.is_string()) {
    std::string text(trim(args.get_string()));
    if (text.empty()) {
      args = json::object{};
    } else if (auto parsed = parse_json(text); parsed && parsed->is_object()) {
      args = std::move(*parsed);
    }
  }
  if (!args.is_object())
    return invalid(tool, "the arguments must be a JSON object, got " + describe(args));

  const auto& compiled = tool.schema();
  auto checked = compiled.validate(args);
  if (checked) return std::move(args.get_object());

  const json::value root(tool.parameters());
  if (coerce(root, {&root}, args)) {
    checked = compiled.validate(args);
    if (checked) return std::move(args.get_object());
  }

  Explainer explainer(root);
  explainer.check(root, args, "");
  if (explainer.issues().empty()) {
    // Something only valijson understands (anyOf, pattern, ...): its message names the path.
    std::string detail = checked.error().message;
    constexpr std::string_view kPrefix = "input does not match the tool's schema at ";
    if (detail.rfind(kPrefix, 0) == 0) detail = detail.substr(kPrefix.size());
    return invalid(tool, detail);
  }
  std::string detail;
  for (const std::string& issue : explainer.issues())
    detail += (detail.empty() ? "" : "; ") + issue;
  return invalid(tool, detail);
}

}  // namespace sb::tool
