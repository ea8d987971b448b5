#include "clienttool/schema.hpp"

// First: it configures valijson before valijson's own headers come in.
#include "clienttool/schema_rewrite.hpp"

#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/constraint_builder.hpp>
#include <valijson/constraints/concrete_constraints.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace sb::clienttool {

CompiledSchema::CompiledSchema() : schema_(std::make_unique<valijson::Schema>()) {}
CompiledSchema::~CompiledSchema() = default;

Result<std::shared_ptr<const CompiledSchema>> CompiledSchema::compile(const json::value& schema) {
  if (!schema.is_object())
    return make_error(ErrorCode::InvalidRequest,
                      "must be a JSON Schema object, got " + std::string(kind_name(schema)));
  return compile(schema.get_object());
}

namespace {

namespace vj = valijson;
using vj::adapters::Adapter;
using vj::adapters::BoostJsonAdapter;

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

Result<std::shared_ptr<const CompiledSchema>> CompiledSchema::compile(const json::object& obj) {
  if (auto r = check_multiple_of(obj); !r) return r.error();
  if (auto it = obj.find("type"); it != obj.end()) {
    if (!it->value().is_string() || it->value().get_string() != "object")
      return make_error(ErrorCode::InvalidRequest,
                        "must describe an object (\"type\": \"object\"), got \"type\": " +
                            json::serialize(it->value()));
  }
  std::shared_ptr<CompiledSchema> compiled(new CompiledSchema());
  json::value document(obj);  // rewritten below; compiling costs far more than this copy
  if (auto r = rewrite_for_valijson(document, compiled->pattern_properties_); !r) return r.error();
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
