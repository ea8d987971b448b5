#include "clienttool/schema.hpp"

// Without this valijson reports a schema it cannot compile by printing and calling abort(): a
// client's bad schema would kill the server instead of getting a 400.
#define VALIJSON_USE_EXCEPTIONS 1
#include <re2/re2.h>
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/constraint_builder.hpp>
#include <valijson/constraints/concrete_constraints.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

namespace sb::clienttool {

CompiledSchema::CompiledSchema() : schema_(std::make_unique<valijson::Schema>()) {}
CompiledSchema::~CompiledSchema() = default;

Result<std::shared_ptr<const CompiledSchema>> CompiledSchema::compile(const json::value& schema) {
  if (!schema.is_object())
    return make_error(ErrorCode::InvalidRequest,
                      "must be a JSON Schema object, got " + std::string(kind_name(schema)));
  return compile(schema.get_object());
}

Result<std::shared_ptr<const CompiledSchema>> CompiledSchema::compile(const json::object& obj) {
  // Compiling costs far more than serializing (and a compiled schema about 1.3 KB), so each
  // distinct schema is compiled once. Keyed by the text: a schema is immutable once compiled.
  // Bounded, because tools come and go; dropping the cache never invalidates a schema in use.
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const CompiledSchema>> cache;
  constexpr std::size_t kMaxEntries = 512;
  std::string key = json::serialize(obj);
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto compiled = compile_uncached(obj);
  if (!compiled) return compiled.error();
  std::lock_guard lock(mutex);
  if (cache.size() >= kMaxEntries) cache.clear();
  cache.emplace(std::move(key), *compiled);
  return compiled;
}

namespace {
// JSON Schema requires "multipleOf" to be greater than 0. valijson does not check, and divides
// by it when validating an integer: a client's {"multipleOf": 0} would stop the server with
// SIGFPE at the first call. Found by fuzz_client_tools. A number under the key "multipleOf" is
// always the keyword (a property named so maps to a schema, which is never a number).
bool not_positive(const json::value& v) {
  if (v.is_int64()) return v.get_int64() <= 0;
  if (v.is_uint64()) return v.get_uint64() == 0;
  return v.is_double() && !(v.get_double() > 0);
}

std::optional<std::string> bad_multiple_of(const json::value& v, const std::string& at) {
  if (const auto* o = v.if_object()) {
    for (const auto& kv : *o) {
      std::string here = at + "/" + std::string(kv.key());
      if (kv.key() == "multipleOf" && not_positive(kv.value())) return here;
      if (auto bad = bad_multiple_of(kv.value(), here)) return bad;
    }
  } else if (const auto* a = v.if_array()) {
    for (std::size_t i = 0; i < a->size(); ++i)
      if (auto bad = bad_multiple_of((*a)[i], at + "/" + std::to_string(i))) return bad;
  }
  return std::nullopt;
}
}  // namespace

// valijson 1.0 evaluates "pattern", "patternProperties" and "format" with std::regex, whose
// libstdc++ matcher backtracks by recursion: "^(a|b)*$" against a 50 KB string overflows the
// stack, and "^(a*)*b$" against 30 characters runs for minutes. A client's schema and a model's
// input would stop or hang the server (found by fuzz_client_tools). So those keywords are moved
// out of valijson's sight before it compiles the schema, under names of ours that custom
// constraints read, and are checked with RE2, which matches in linear time without recursion.
namespace {

namespace vj = valijson;
using vj::adapters::Adapter;
using vj::adapters::BoostJsonAdapter;

constexpr const char* kPatternKey = "x-switchboard-pattern";
constexpr const char* kFormatKey = "x-switchboard-format";
constexpr const char* kPatternPropertiesKey = "x-switchboard-patternProperties";

using Regex = std::shared_ptr<const re2::RE2>;

Result<Regex> compile_regex(const std::string& pattern, const std::string& at) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_shared<const re2::RE2>(pattern, options);
  if (!re->ok())
    return make_error(ErrorCode::InvalidRequest,
                      "is not a valid JSON Schema: the pattern at " + at +
                          " is not a regular expression Switchboard can check (RE2 syntax: no "
                          "lookaround or backreferences): " +
                          re->error());
  return Regex(std::move(re));
}

void push_error(vj::ValidationResults* results, const std::vector<std::string>& context,
                std::string message) {
  if (results) results->pushError(context, std::move(message));
}

// {"pattern": P}: the string matches P somewhere (ECMA-262's search semantics).
class PatternConstraint : public vj::constraints::PolyConstraint {
 public:
  explicit PatternConstraint(Regex re) : re_(std::move(re)) {}
  bool validate(const Adapter& target, const std::vector<std::string>& context,
                vj::ValidationResults* results) const override {
    if (!target.isString()) return true;
    if (re2::RE2::PartialMatch(target.getString(), *re_)) return true;
    push_error(results, context, "does not match the pattern \"" + re_->pattern() + "\"");
    return false;
  }

 private:
  Constraint* cloneInto(void* where) const override { return new (where) PatternConstraint(*this); }
  std::size_t sizeOf() const override { return sizeof(PatternConstraint); }
  Regex re_;
};

// The digits of a year, taken modulo 400, decide February's length (RFC 3339 section 5.7).
bool leap_year(std::string_view digits) {
  int mod400 = 0;
  for (char c : digits)
    mod400 = (mod400 * 10 + (c - '0')) % 400;
  return mod400 % 4 == 0 && (mod400 % 100 != 0 || mod400 == 0);
}

bool valid_day(std::string_view year, int month, int day) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int limit = kDays[month - 1] + (month == 2 && leap_year(year) ? 1 : 0);
  return day >= 1 && day <= limit;
}

// {"format": F}: "date", "time" and "date-time" as RFC 3339 writes them, the formats valijson
// asserts; every other format is an annotation and passes, as it does in valijson.
class FormatConstraint : public vj::constraints::PolyConstraint {
 public:
  explicit FormatConstraint(std::string format) : format_(std::move(format)) {}
  bool validate(const Adapter& target, const std::vector<std::string>& context,
                vj::ValidationResults* results) const override {
    if (!target.isString()) return true;
    static const std::string kDate = R"(([0-9]+)-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))";
    static const std::string kTime =
        R"((?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))";
    static const re2::RE2 date(kDate), time(kTime), date_time(kDate + "[Tt]" + kTime);
    const std::string text = target.getString();
    std::string year;
    int month = 0, day = 0;
    bool ok = true;
    if (format_ == "date")
      ok = re2::RE2::FullMatch(text, date, &year, &month, &day) && valid_day(year, month, day);
    else if (format_ == "time")
      ok = re2::RE2::FullMatch(text, time);
    else if (format_ == "date-time")
      ok = re2::RE2::FullMatch(text, date_time, &year, &month, &day) && valid_day(year, month, day);
    if (!ok) push_error(results, context, "is not a valid " + format_ + " (RFC 3339)");
    return ok;
  }

 private:
  Constraint* cloneInto(void* where) const override { return new (where) FormatConstraint(*this); }
  std::size_t sizeOf() const override { return sizeof(FormatConstraint); }
  std::string format_;
};

}  // namespace

// An object schema's "patternProperties", with the names its "properties" lists and its
// "additionalProperties": a member whose name RE2 matches with a pattern validates against that
// pattern's schema; one that no pattern and no listed name takes validates against
// "additionalProperties" (any value when absent). The subschemas are compiled from the whole
// document with a "$ref" to their place, so their own "$ref"s resolve as in the document.
struct CompiledSchema::PatternProperties {
  struct Entry {
    Regex re;                                  // null for additionalProperties
    std::string ref;                           // "#/..." of the subschema in the rewritten document
    std::optional<bool> constant;              // a boolean schema
    std::unique_ptr<valijson::Schema> schema;  // otherwise
  };
  std::set<std::string, std::less<>> listed;
  std::vector<Entry> patterns;
  std::optional<Entry> additional;
};

namespace {

using PatternProperties = CompiledSchema::PatternProperties;

bool apply(const PatternProperties::Entry& entry, const Adapter& value,
           const std::vector<std::string>& context, vj::ValidationResults* results) {
  if (entry.constant) return *entry.constant;
  // Members of a Boost.JSON document are BoostJsonAdapters; valijson's visitor needs the type.
  const auto* concrete = dynamic_cast<const BoostJsonAdapter*>(&value);
  if (!concrete) throw std::runtime_error("patternProperties applied to a value of another kind");
  std::unordered_map<std::string, std::regex> unused;  // no std::regex is left to cache
  vj::ValidationVisitor<BoostJsonAdapter> visitor(*concrete, context, true, results, unused);
  return visitor.validateSchema(*entry.schema);
}

class PatternPropertiesConstraint : public vj::constraints::PolyConstraint {
 public:
  explicit PatternPropertiesConstraint(const PatternProperties* rule) : rule_(rule) {}
  bool validate(const Adapter& target, const std::vector<std::string>& context,
                vj::ValidationResults* results) const override {
    if (!target.isObject()) return true;
    bool ok = true;
    target.applyToObject([&](const std::string& name, const Adapter& value) {
      std::vector<std::string> at = context;
      at.push_back("[" + name + "]");
      bool taken = rule_->listed.contains(name);
      for (const auto& entry : rule_->patterns) {
        if (!re2::RE2::PartialMatch(name, *entry.re)) continue;
        taken = true;
        if (!apply(entry, value, at, results)) {
          push_error(
              results, at,
              "does not match the schema of patternProperties \"" + entry.re->pattern() + "\"");
          ok = false;
        }
      }
      if (!taken && rule_->additional && !apply(*rule_->additional, value, at, results)) {
        push_error(results, at, "is a property the schema does not allow ('" + name + "')");
        ok = false;
      }
      return ok || results != nullptr;  // without results, the first failure decides
    });
    return ok;
  }

 private:
  Constraint* cloneInto(void* where) const override {
    return new (where) PatternPropertiesConstraint(*this);
  }
  std::size_t sizeOf() const override { return sizeof(PatternPropertiesConstraint); }
  const PatternProperties* rule_;  // owned by the CompiledSchema these constraints belong to
};

// Reads our keywords back when valijson compiles the rewritten document.
class PatternBuilder : public vj::ConstraintBuilder {
 public:
  vj::constraints::Constraint* make(const Adapter& value) const override {
    re2::RE2::Options options;
    options.set_log_errors(false);
    // Checked by the rewrite; compiling again is cheaper than carrying the object through.
    return new PatternConstraint(std::make_shared<const re2::RE2>(value.getString(), options));
  }
};

class FormatBuilder : public vj::ConstraintBuilder {
 public:
  vj::constraints::Constraint* make(const Adapter& value) const override {
    return new FormatConstraint(value.getString());
  }
};

class PatternPropertiesBuilder : public vj::ConstraintBuilder {
 public:
  explicit PatternPropertiesBuilder(const std::vector<std::unique_ptr<PatternProperties>>& rules)
      : rules_(rules) {}
  vj::constraints::Constraint* make(const Adapter& value) const override {
    std::int64_t index = -1;
    value.applyToObject([&](const std::string& name, const Adapter& v) {
      if (name == "rule") index = v.getInteger();
      return true;
    });
    if (index < 0 || static_cast<std::size_t>(index) >= rules_.size())
      throw std::runtime_error(std::string(kPatternPropertiesKey) + " is reserved");
    return new PatternPropertiesConstraint(rules_[static_cast<std::size_t>(index)].get());
  }

 private:
  const std::vector<std::unique_ptr<PatternProperties>>& rules_;
};

// Moves the keywords of every schema in the document to ours (see above), compiling each
// pattern, and notes where the schemas are so that a "$ref" elsewhere is refused: valijson
// would compile what it points at as written, std::regex and all.
class Rewriter {
 public:
  explicit Rewriter(std::vector<std::unique_ptr<PatternProperties>>& rules) : rules_(rules) {}

  Result<void> schema(json::value& v, const std::string& at) {
    places_.insert(at);
    auto* obj = v.if_object();
    if (!obj) return {};
    for (auto& kv : *obj) {
      std::string here = at + "/" + escape_pointer_token(kv.key());
      Result<void> r;
      json::value& child = kv.value();
      std::string_view key = kv.key();
      // Keywords whose subschemas apply to the same value as this schema, not to a part of it.
      bool same_value = key == "allOf" || key == "anyOf" || key == "oneOf" || key == "not" ||
                        key == "if" || key == "then" || key == "else" || key == "dependencies";
      auto sub = [&](json::value& s, std::string place) {
        if (same_value && (key != "dependencies" || s.is_object())) applies_[at].push_back(place);
        return schema(s, std::move(place));
      };
      if (key == "$ref" && child.is_string()) {
        refs_.emplace(at, std::string(child.get_string()));
      } else if (key == "properties" || key == "patternProperties" || key == "definitions" ||
                 key == "$defs" || key == "dependencies") {
        if (auto* members = child.if_object())
          for (auto& m : *members)
            if (r = sub(m.value(), here + "/" + escape_pointer_token(m.key())); !r) return r;
      } else if (key == "allOf" || key == "anyOf" || key == "oneOf" || key == "items") {
        if (auto* items = child.if_array()) {
          for (std::size_t i = 0; i < items->size(); ++i)
            if (r = sub((*items)[i], here + "/" + std::to_string(i)); !r) return r;
        } else if (key == "items") {
          r = sub(child, here);
        }
      } else if (key == "additionalProperties" || key == "additionalItems" || key == "contains" ||
                 key == "propertyNames" || key == "not" || key == "if" || key == "then" ||
                 key == "else") {
        r = sub(child, here);
      }
      if (!r) return r;
    }
    return move_keywords(*obj, at);
  }

  // A "$ref" must point into the document, at a schema the rewrite went through; and no schema
  // may come back to itself through "$ref"s and keywords that apply to the same value (allOf,
  // not, ...). valijson follows both by recursion, at compile time and for every validation:
  // {"$ref": "object"} (a relative URI naming the document itself), two "$ref"s naming each
  // other and {"allOf": [{"$ref": "#"}]} each overflowed the stack.
  Result<void> check_refs() {
    auto refused = [](const std::string& at, const std::string& ref, const std::string& why) {
      return make_error(ErrorCode::InvalidRequest, "is not a valid JSON Schema: the $ref at " + at +
                                                       "/$ref (\"" + ref + "\") " + why);
    };
    for (const auto& [at, ref] : refs_) {
      std::string target = ref.starts_with("#") ? ref.substr(1) : ref;
      while (!target.empty() && target.back() == '/')
        target.pop_back();
      if (!ref.starts_with("#") || (!target.empty() && target.front() != '/'))
        return refused(at, ref, "is not a JSON Pointer into this document (\"#/...\")");
      if (!places_.contains(target))
        return refused(at, ref,
                       "points at no schema: not under properties, definitions, $defs, items or "
                       "another keyword whose value is a schema");
      // valijson reads nothing beside a "$ref": the reference is the schema's only way on.
      applies_[at] = {std::move(target)};
    }
    // Depth-first search for a cycle, without recursion (a schema can have many places).
    enum class Mark { Open, Done };
    std::map<std::string_view, Mark> marks;
    for (const auto& [start, ignored] : applies_) {
      if (marks.contains(start)) continue;
      std::vector<std::pair<std::string_view, std::size_t>> stack{{start, 0}};
      marks[start] = Mark::Open;
      while (!stack.empty()) {
        auto& [place, next] = stack.back();
        auto it = applies_.find(std::string(place));
        if (it == applies_.end() || next == it->second.size()) {
          marks[place] = Mark::Done;
          stack.pop_back();
          continue;
        }
        std::string_view to = it->second[next++];
        auto mark = marks.find(to);
        if (mark == marks.end()) {
          marks[to] = Mark::Open;
          stack.emplace_back(to, 0);
        } else if (mark->second == Mark::Open) {
          return make_error(ErrorCode::InvalidRequest,
                            "is not a valid JSON Schema: the schema at " +
                                std::string(to.empty() ? "/" : to) +
                                " applies to itself through $ref, allOf, anyOf, oneOf, not, "
                                "if/then/else or dependencies without descending into the value");
        }
      }
    }
    return {};
  }

 private:
  Result<void> move_keywords(json::object& obj, const std::string& at) {
    for (const char* ours : {kPatternKey, kFormatKey, kPatternPropertiesKey})
      if (obj.contains(ours))
        return make_error(ErrorCode::InvalidRequest, "is not a valid JSON Schema: \"" +
                                                         std::string(ours) + "\" (at " + at +
                                                         ") is a name Switchboard reserves");
    if (auto* p = obj.if_contains("pattern"); p && p->is_string()) {
      auto re = compile_regex(std::string(p->get_string()), at + "/pattern");
      if (!re) return re.error();
      json::value pattern = std::move(*p);  // before inserting, which can move obj's members
      obj.erase("pattern");
      obj[kPatternKey] = std::move(pattern);
    }
    if (auto* f = obj.if_contains("format"); f && f->is_string()) {
      json::value format = std::move(*f);
      obj.erase("format");
      obj[kFormatKey] = std::move(format);
    }
    auto* pp = obj.if_contains("patternProperties");
    if (!pp || !pp->is_object()) return {};
    auto rule = std::make_unique<PatternProperties>();
    std::string base = at + "/" + kPatternPropertiesKey;
    for (const auto& m : pp->get_object()) {
      std::string pattern(m.key());
      auto re = compile_regex(pattern, at + "/patternProperties/" + escape_pointer_token(pattern));
      if (!re) return re.error();
      rule->patterns.push_back({std::move(*re),
                                "#" + base + "/patterns/" + escape_pointer_token(pattern),
                                constant(m.value()), nullptr});
    }
    if (auto* props = obj.if_contains("properties"); props && props->is_object())
      for (const auto& m : props->get_object())
        rule->listed.emplace(m.key());
    json::object moved;
    moved["rule"] = static_cast<std::int64_t>(rules_.size());
    moved["patterns"] = std::move(*pp);
    obj.erase("patternProperties");
    if (auto* add = obj.if_contains("additionalProperties")) {
      rule->additional =
          PatternProperties::Entry{nullptr, "#" + base + "/additional", constant(*add), nullptr};
      moved["additional"] = std::move(*add);
      obj.erase("additionalProperties");
    }
    obj[kPatternPropertiesKey] = std::move(moved);
    rules_.push_back(std::move(rule));
    return {};
  }

  static std::optional<bool> constant(const json::value& v) {
    if (v.is_bool()) return v.get_bool();
    return std::nullopt;
  }

  std::vector<std::unique_ptr<PatternProperties>>& rules_;
  std::set<std::string> places_;
  std::map<std::string, std::string> refs_;  // schema location -> its "$ref"
  // Schema location -> the places of the subschemas that apply to the same value.
  std::map<std::string, std::vector<std::string>> applies_;
};

// valijson with our keywords' builders; throws what valijson throws for a bad schema.
void populate(const json::value& document, valijson::Schema& out,
              const std::vector<std::unique_ptr<PatternProperties>>& rules) {
  vj::SchemaParser parser;
  // The parser deletes its builders when it is destroyed.
  parser.addConstraintBuilder(kPatternKey, new PatternBuilder());
  parser.addConstraintBuilder(kFormatKey, new FormatBuilder());
  parser.addConstraintBuilder(kPatternPropertiesKey, new PatternPropertiesBuilder(rules));
  BoostJsonAdapter adapter(document);
  // No fetch callback: a remote $ref is a compile error rather than a network request.
  parser.populateSchema(adapter, out);
}

}  // namespace

Result<std::shared_ptr<const CompiledSchema>> CompiledSchema::compile_uncached(
    const json::object& obj) {
  for (const auto& kv : obj) {
    if (auto bad = bad_multiple_of(kv.value(), "/" + std::string(kv.key())))
      return make_error(
          ErrorCode::InvalidRequest,
          "is not a valid JSON Schema: multipleOf must be greater than 0 (at " + *bad + ")");
    if (kv.key() == "multipleOf" && not_positive(kv.value()))
      return make_error(ErrorCode::InvalidRequest,
                        "is not a valid JSON Schema: multipleOf must be greater than 0 (at "
                        "/multipleOf)");
  }
  if (auto it = obj.find("type"); it != obj.end()) {
    if (!it->value().is_string() || it->value().get_string() != "object")
      return make_error(ErrorCode::InvalidRequest,
                        "must describe an object (\"type\": \"object\"), got \"type\": " +
                            json::serialize(it->value()));
  }
  std::shared_ptr<CompiledSchema> compiled(new CompiledSchema());
  json::value document(obj);  // rewritten below; compiling costs far more than this copy
  Rewriter rewriter(compiled->pattern_properties_);
  if (auto r = rewriter.schema(document, ""); !r) return r.error();
  if (auto r = rewriter.check_refs(); !r) return r.error();
  try {
    populate(document, *compiled->schema_, compiled->pattern_properties_);
    // Each patternProperties subschema is the document with a "$ref" to it at the top (valijson
    // ignores a "$ref"'s siblings), so "#/definitions/..." inside it means what it means here.
    for (auto& rule : compiled->pattern_properties_) {
      auto compile_entry = [&](PatternProperties::Entry& entry) {
        if (entry.constant) return;
        json::value sub = document;
        sub.get_object()["$ref"] = entry.ref;
        entry.schema = std::make_unique<valijson::Schema>();
        populate(sub, *entry.schema, compiled->pattern_properties_);
      };
      for (auto& entry : rule->patterns)
        compile_entry(entry);
      if (rule->additional) compile_entry(*rule->additional);
    }
  } catch (const std::exception& e) {
    return make_error(ErrorCode::InvalidRequest,
                      std::string("is not a valid JSON Schema: ") + e.what());
  }
  return std::shared_ptr<const CompiledSchema>(std::move(compiled));
}

namespace {
// valijson reports a path as {"<root>", "[location]", "[0]"}; users read JSON Pointers.
std::string pointer(const std::vector<std::string>& context) {
  std::string out;
  for (const auto& part : context) {
    if (part == "<root>") continue;
    std::string_view p = part;
    if (p.size() >= 2 && p.front() == '[' && p.back() == ']') p = p.substr(1, p.size() - 2);
    if (p.size() >= 2 && p.front() == '"' && p.back() == '"') p = p.substr(1, p.size() - 2);
    out.push_back('/');
    out.append(p);
  }
  return out.empty() ? "/" : out;
}
}  // namespace

Result<void> CompiledSchema::validate(const json::value& input) const {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::BoostJsonAdapter adapter(input);
  try {
    if (validator.validate(*schema_, adapter, &results)) return {};
  } catch (const std::exception& e) {
    // A schema can compile and still fail when applied (a "pattern" that is not a valid regex
    // throws std::regex_error on the first string it meets); that is an error value, not a throw.
    return make_error(ErrorCode::InvalidRequest,
                      std::string("the tool's schema cannot be applied to the input: ") + e.what());
  }
  // valijson reports the outermost failure first ("failed to match all properties"); the most
  // useful message is the deepest one, which names the field that is actually wrong.
  valijson::ValidationResults::Error best;
  std::size_t best_depth = 0;
  valijson::ValidationResults::Error err;
  bool first = true;
  while (results.popError(err)) {
    if (first || err.context.size() > best_depth) {
      best = err;
      best_depth = err.context.size();
      first = false;
    }
  }
  return make_error(ErrorCode::InvalidRequest, "input does not match the tool's schema at " +
                                                   pointer(best.context) + ": " + best.description);
}

}  // namespace sb::clienttool
