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

Result<std::shared_ptr<const CompiledSchema>> CompiledSchema::compile_uncached(
    const json::object& obj) {
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
