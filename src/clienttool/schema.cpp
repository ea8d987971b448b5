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

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

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

// ECMA-262 spellings RE2 (2022-06) writes differently: \uXXXX is \x{XXXX}, and a named group
// (?<name>...) is (?P<name>...). Everything else RE2 accepts means the same; what it refuses
// (lookaround, backreferences) is what makes matching exponential.
std::string to_re2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'u' && i + 5 < pattern.size() &&
          std::all_of(pattern.begin() + i + 2, pattern.begin() + i + 6,
                      [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
        out.append("\\x{").append(pattern.substr(i + 2, 4)).append("}");
        i += 5;
      } else {
        out.append(pattern.substr(i, 2));
        ++i;
      }
    } else if (pattern.substr(i, 3) == "(?<" && i + 3 < pattern.size() && pattern[i + 3] != '=' &&
               pattern[i + 3] != '!') {
      out.append("(?P<");
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// RE2 matches in time linear in the input, but with a factor of the program's size when its DFA
// cache overflows; a client's pattern has no business being larger than this.
constexpr int kMaxRegexProgram = 5000;

Result<Regex> compile_regex(std::string_view pattern, const std::string& at) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_shared<const re2::RE2>(to_re2(pattern), options);
  auto refused = [&](const std::string& why) {
    return make_error(ErrorCode::InvalidRequest,
                      "is not a valid JSON Schema: the pattern at " + at + " " + why);
  };
  if (!re->ok())
    return refused(
        "is not a regular expression Switchboard can check (RE2 syntax: no lookaround or "
        "backreferences): " +
        re->error());
  if (re->ProgramSize() > kMaxRegexProgram)
    return refused("is too large (" + std::to_string(re->ProgramSize()) +
                   " RE2 instructions; the limit is " + std::to_string(kMaxRegexProgram) + ")");
  return Regex(std::move(re));
}

void push_error(vj::ValidationResults* results, const std::vector<std::string>& context,
                std::string message) {
  if (results) results->pushError(context, std::move(message));
}

// {"pattern": P}: the string matches P somewhere (ECMA-262's search semantics).
class PatternConstraint : public vj::constraints::PolyConstraint {
 public:
  PatternConstraint(Regex re, std::string written)
      : re_(std::move(re)), written_(std::move(written)) {}
  bool validate(const Adapter& target, const std::vector<std::string>& context,
                vj::ValidationResults* results) const override {
    if (!target.isString()) return true;
    if (re2::RE2::PartialMatch(target.getString(), *re_)) return true;
    push_error(results, context, "does not match the pattern \"" + written_ + "\"");
    return false;
  }

 private:
  Constraint* cloneInto(void* where) const override { return new (where) PatternConstraint(*this); }
  std::size_t sizeOf() const override { return sizeof(PatternConstraint); }
  Regex re_;
  std::string written_;  // as the schema writes it
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
    std::string pattern;                       // as the schema writes it
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
          push_error(results, at,
                     "does not match the schema of patternProperties \"" + entry.pattern + "\"");
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
    // Checked by the rewrite; compiling again is cheaper than carrying the object through.
    std::string written = value.getString();
    auto re = compile_regex(written, "");
    if (!re) throw std::runtime_error(re.error().message);
    return new PatternConstraint(std::move(*re), std::move(written));
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

// Limits on what a schema may make valijson do, which recurses for each schema it compiles and
// for each same-value keyword (allOf, $ref, ...) it validates, and evaluates every branch of an
// allOf: the nesting of schemas as valijson compiles them (the JSON depth limit bounds a
// document's own nesting; "$ref"s go further), the longest chain of same-value keywords, the
// number of such chains from one schema (2^40 for 40 levels of allOf with two "$ref"s each),
// and the number of patternProperties subschemas (each is compiled on its own).
constexpr std::size_t kMaxCompileNesting = 256;
constexpr std::size_t kMaxSameValueChain = 32;
constexpr std::uint64_t kMaxSameValuePaths = 4096;
constexpr std::size_t kMaxPatternProperties = 1000;

// Prepares a schema document for valijson, in place:
// - moves "pattern", "format" and "patternProperties" (with its object's "additionalProperties")
//   to our keywords, compiling each pattern with RE2;
// - drops a string "id": valijson resolves "$ref"s against it, and only "#/..." references are
//   accepted, so it can only do harm (a relative id grew valijson's scope on every visit of "#"
//   until the stack ran out);
// - resolves every "$ref" as valijson does, refusing one that is not a JSON Pointer into the
//   document or that lands anywhere but on a schema the walk went through (valijson would compile
//   what it points at as written, std::regex and all);
// - refuses what would make valijson recurse without end or for too long (limits above).
// Schemas are known by their address in the document: a parent is rewritten before the walk
// descends, so a schema's address does not change after it is seen.
class Rewriter {
 public:
  explicit Rewriter(std::vector<std::unique_ptr<PatternProperties>>& rules) : rules_(rules) {}

  Result<void> run(json::value& document) {
    if (auto r = schema(document, "", ""); !r) return r;
    if (auto r = resolve_refs(document); !r) return r;
    if (auto r = check_compile_nesting(document); !r) return r;
    return check_same_value_chains();
  }

 private:
  struct Node {
    std::string at;                              // JSON Pointer, for messages
    std::vector<const json::value*> children;    // every subschema, in document order
    std::vector<const json::value*> same_value;  // those applying to this schema's value
    std::optional<std::string> ref;              // "$ref", which replaces everything else
  };

  // `at` names the schema as the client wrote it (for messages); `path` is where it is in the
  // rewritten document (for the "$ref"s that compile patternProperties subschemas).
  Result<void> schema(json::value& v, const std::string& at, const std::string& path) {
    Node& node = nodes_[&v];
    node.at = at;
    auto* obj = v.if_object();
    if (!obj) return {};
    if (auto r = move_keywords(*obj, at, path); !r) return r;
    if (auto* ref = obj->if_contains("$ref"); ref && ref->is_string())
      node.ref = std::string(ref->get_string());
    const bool has_if = obj->contains("if");
    for (auto& kv : *obj) {
      std::string_view key = kv.key();
      const std::string token = "/" + escape_pointer_token(key);
      std::string here = at + token;
      json::value& child = kv.value();
      bool same_value = key == "allOf" || key == "anyOf" || key == "oneOf" || key == "not" ||
                        key == "if" || key == "dependencies" ||
                        ((key == "then" || key == "else") && has_if);
      struct Sub {
        json::value* value;
        std::string at, path;
      };
      std::vector<Sub> subs;
      if (key == "properties" || key == "definitions" || key == "$defs" || key == "dependencies") {
        if (auto* members = child.if_object())
          for (auto& m : *members)
            if (key != "dependencies" || m.value().is_object()) {
              std::string name = "/" + escape_pointer_token(m.key());
              subs.push_back({&m.value(), here + name, path + token + name});
            }
      } else if (key == "allOf" || key == "anyOf" || key == "oneOf" || key == "items") {
        if (auto* items = child.if_array()) {
          for (std::size_t i = 0; i < items->size(); ++i) {
            std::string index = "/" + std::to_string(i);
            subs.push_back({&(*items)[i], here + index, path + token + index});
          }
        } else if (key == "items") {
          subs.push_back({&child, here, path + token});
        }
      } else if (key == "additionalProperties" || key == "additionalItems" || key == "contains" ||
                 key == "propertyNames" || key == "not" || key == "if" || key == "then" ||
                 key == "else") {
        subs.push_back({&child, here, path + token});
      } else if (key == kPatternPropertiesKey) {
        // Named in messages where the schema writes them.
        auto& moved = child.get_object();
        auto& patterns = moved["patterns"].get_array();
        const auto& rule = *rules_[static_cast<std::size_t>(moved["rule"].as_int64())];
        for (std::size_t i = 0; i < patterns.size(); ++i)
          subs.push_back(
              {&patterns[i],
               at + "/patternProperties/" + escape_pointer_token(rule.patterns[i].pattern),
               path + token + "/patterns/" + std::to_string(i)});
        if (auto* add = moved.if_contains("additional"))
          subs.push_back({add, at + "/additionalProperties", path + token + "/additional"});
      }
      for (auto& sub : subs) {
        // nodes_ is a map: `node` stays valid while children are added.
        node.children.push_back(sub.value);
        if (same_value) node.same_value.push_back(sub.value);
        if (auto r = schema(*sub.value, sub.at, sub.path); !r) return r;
      }
    }
    return {};
  }

  Result<void> move_keywords(json::object& obj, const std::string& at, const std::string& path) {
    for (const char* ours : {kPatternKey, kFormatKey, kPatternPropertiesKey})
      if (obj.contains(ours))
        return make_error(ErrorCode::InvalidRequest, "is not a valid JSON Schema: \"" +
                                                         std::string(ours) + "\" (at " + at +
                                                         ") is a name Switchboard reserves");
    if (auto* id = obj.if_contains("id"); id && id->is_string()) obj.erase("id");
    // Each value is moved out before inserting, which can move obj's members.
    if (auto* p = obj.if_contains("pattern"); p && p->is_string()) {
      auto re = compile_regex(p->get_string(), at + "/pattern");
      if (!re) return re.error();
      json::value pattern = std::move(*p);
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
    // The subschemas go in an array, so that the "$ref" that compiles each names it by index
    // (a key would need escaping, and valijson decodes "%" in references).
    const std::string base = path + "/" + kPatternPropertiesKey;
    json::array schemas;
    for (auto& m : pp->get_object()) {
      std::string pattern(m.key());
      auto re = compile_regex(pattern, at + "/patternProperties/" + escape_pointer_token(pattern));
      if (!re) return re.error();
      if (++pattern_properties_ > kMaxPatternProperties)
        return make_error(ErrorCode::InvalidRequest, "is not a valid JSON Schema: more than " +
                                                         std::to_string(kMaxPatternProperties) +
                                                         " patternProperties");
      rule->patterns.push_back({std::move(*re), pattern,
                                "#" + base + "/patterns/" + std::to_string(schemas.size()),
                                constant(m.value()), nullptr});
      schemas.push_back(std::move(m.value()));
    }
    obj.erase("patternProperties");
    if (auto* props = obj.if_contains("properties"); props && props->is_object())
      for (const auto& m : props->get_object())
        rule->listed.emplace(m.key());
    json::object moved;
    moved["rule"] = static_cast<std::int64_t>(rules_.size());
    moved["patterns"] = std::move(schemas);
    if (auto* add = obj.if_contains("additionalProperties")) {
      rule->additional = PatternProperties::Entry{nullptr, "", "#" + base + "/additional",
                                                  constant(*add), nullptr};
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

  // What valijson's resolveJsonPointer does, without its recursion: "~1", "~0", then "%XX"
  // decoded in each token; an empty token is refused (valijson skips it, one recursion each).
  Result<const json::value*> resolve(const json::value& document, const Node& node) const {
    const std::string& ref = *node.ref;
    auto refused = [&](const std::string& why) {
      return make_error(ErrorCode::InvalidRequest, "is not a valid JSON Schema: the $ref at " +
                                                       node.at + "/$ref (\"" + ref + "\") " + why);
    };
    if (!ref.starts_with("#"))
      return refused("is not a JSON Pointer into this document (\"#/...\")");
    std::string_view pointer = std::string_view(ref).substr(1);
    while (!pointer.empty() && pointer.back() == '/')
      pointer.remove_suffix(1);
    if (!pointer.empty() && pointer.front() != '/')
      return refused("is not a JSON Pointer into this document (\"#/...\")");
    const json::value* at = &document;
    while (!pointer.empty()) {
      pointer.remove_prefix(1);
      std::size_t end = std::min(pointer.find('/'), pointer.size());
      std::string token(pointer.substr(0, end));
      pointer.remove_prefix(end);
      if (token.empty()) return refused("has an empty reference token");
      for (auto [from, to] : {std::pair{"~1", "/"}, std::pair{"~0", "~"}})
        for (std::size_t n = token.find(from); n != std::string::npos; n = token.find(from, n + 1))
          token.replace(n, 2, to);
      for (std::size_t n = token.find('%'); n != std::string::npos; n = token.find('%', n + 1)) {
        if (n + 2 >= token.size() || !std::isxdigit(static_cast<unsigned char>(token[n + 1])) ||
            !std::isxdigit(static_cast<unsigned char>(token[n + 2])))
          return refused("has a \"%\" that is not followed by two hex digits");
        token.replace(n, 3, 1, static_cast<char>(std::stoi(token.substr(n + 1, 2), nullptr, 16)));
      }
      if (const auto* obj = at->if_object()) {
        at = obj->if_contains(token);
      } else if (const auto* arr = at->if_array()) {
        std::size_t index = 0;
        auto [p, ec] = std::from_chars(token.data(), token.data() + token.size(), index);
        at = ec == std::errc{} && p == token.data() + token.size() ? arr->if_contains(index)
                                                                   : nullptr;
      } else {
        at = nullptr;
      }
      if (!at) return refused("points at nothing in this document");
    }
    if (!nodes_.contains(at))
      return refused(
          "points at no schema: not under properties, definitions, $defs, items or another "
          "keyword whose value is a schema");
    return at;
  }

  // valijson reads nothing beside a "$ref": the reference is the schema's only way on.
  Result<void> resolve_refs(const json::value& document) {
    for (auto& [ignored, node] : nodes_) {
      if (!node.ref) continue;
      auto target = resolve(document, node);
      if (!target) return target.error();
      node.children = {*target};
      node.same_value = {*target};
    }
    return {};
  }

  // valijson compiles depth first and each schema once; its recursion is as deep as this walk.
  Result<void> check_compile_nesting(const json::value& document) const {
    std::unordered_set<const json::value*> seen{&document};
    std::vector<std::pair<const json::value*, std::size_t>> stack{{&document, 0}};
    while (!stack.empty()) {
      auto [v, next] = stack.back();
      const auto& kids = nodes_.at(v).children;
      if (next == kids.size()) {
        stack.pop_back();
        continue;
      }
      ++stack.back().second;
      if (!seen.insert(kids[next]).second) continue;
      stack.emplace_back(kids[next], 0);
      if (stack.size() > kMaxCompileNesting)
        return make_error(ErrorCode::InvalidRequest,
                          "is not a valid JSON Schema: its schemas nest (through \"$ref\"s) more "
                          "than " +
                              std::to_string(kMaxCompileNesting) + " deep, at " +
                              nodes_.at(kids[next]).at);
    }
    return {};
  }

  // Over the graph of same-value keywords: no cycle, no chain longer than kMaxSameValueChain,
  // no schema with more than kMaxSameValuePaths chains below it. Depth first, without recursion.
  Result<void> check_same_value_chains() const {
    struct Info {
      bool done = false;
      std::size_t longest = 0;  // edges
      std::uint64_t paths = 1;  // chains starting here, this one included
    };
    std::unordered_map<const json::value*, Info> info;
    auto refused = [&](const json::value* v, const std::string& why) {
      return make_error(ErrorCode::InvalidRequest,
                        "is not a valid JSON Schema: the schema at " +
                            (nodes_.at(v).at.empty() ? std::string("/") : nodes_.at(v).at) + " " +
                            why);
    };
    for (const auto& [start, ignored] : nodes_) {
      if (info.contains(start)) continue;
      std::vector<std::pair<const json::value*, std::size_t>> stack{{start, 0}};
      info[start];
      while (!stack.empty()) {
        auto [v, next] = stack.back();
        const auto& edges = nodes_.at(v).same_value;
        if (next == edges.size()) {
          Info& mine = info[v];
          for (const auto* to : edges) {
            const Info& theirs = info[to];
            mine.longest = std::max(mine.longest, theirs.longest + 1);
            mine.paths = std::min(mine.paths + theirs.paths, kMaxSameValuePaths + 1);
          }
          mine.done = true;
          if (mine.longest > kMaxSameValueChain)
            return refused(v, "applies more than " + std::to_string(kMaxSameValueChain) +
                                  " schemas in a chain to one value (through $ref, allOf, anyOf, "
                                  "oneOf, not, if/then/else or dependencies)");
          if (mine.paths > kMaxSameValuePaths)
            return refused(v, "applies more than " + std::to_string(kMaxSameValuePaths) +
                                  " chains of schemas to one value");
          stack.pop_back();
          continue;
        }
        ++stack.back().second;
        const json::value* to = edges[next];
        auto it = info.find(to);
        if (it == info.end()) {
          info[to];
          stack.emplace_back(to, 0);
        } else if (!it->second.done) {
          return refused(to,
                         "applies to itself through $ref, allOf, anyOf, oneOf, not, if/then/else "
                         "or dependencies without descending into the value");
        }
      }
    }
    return {};
  }

  std::vector<std::unique_ptr<PatternProperties>>& rules_;
  std::map<const json::value*, Node> nodes_;
  std::size_t pattern_properties_ = 0;
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
  if (auto r = Rewriter(compiled->pattern_properties_).run(document); !r) return r.error();
  try {
    populate(document, *compiled->schema_, compiled->pattern_properties_);
    // Each patternProperties subschema is compiled from the document with a "$ref" to it at the
    // top (valijson ignores a "$ref"'s siblings), so "#/definitions/..." inside it means what it
    // means here. (The document is a copy, of no use once compiled.)
    auto& root = document.get_object();
    for (auto& rule : compiled->pattern_properties_) {
      auto compile_entry = [&](PatternProperties::Entry& entry) {
        if (entry.constant) return;
        root["$ref"] = entry.ref;
        entry.schema = std::make_unique<valijson::Schema>();
        populate(document, *entry.schema, compiled->pattern_properties_);
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
