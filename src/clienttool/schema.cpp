#include "clienttool/schema.hpp"

// Without this valijson reports a schema it cannot compile by printing and calling abort(): a
// client's bad schema would kill the server instead of getting a 400.
#define VALIJSON_USE_EXCEPTIONS 1
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <mutex>
#include <optional>
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
  try {
    valijson::SchemaParser parser;
    json::value schema(obj);  // valijson's adapter wants a value; compiling costs far more
    valijson::adapters::BoostJsonAdapter adapter(schema);
    // No fetch callback: a remote $ref is a compile error rather than a network request.
    parser.populateSchema(adapter, *compiled->schema_);
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
