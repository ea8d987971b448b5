#include "clienttool/schema_rewrite.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace sb::clienttool {

using PatternProperties = CompiledSchema::PatternProperties;

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

}  // namespace

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

Result<void> check_multiple_of(const json::object& schema) {
  for (const auto& kv : schema) {
    if (auto bad = bad_multiple_of(kv.value(), "/" + std::string(kv.key())))
      return make_error(
          ErrorCode::InvalidRequest,
          "is not a valid JSON Schema: multipleOf must be greater than 0 (at " + *bad + ")");
    if (kv.key() == "multipleOf" && not_positive(kv.value()))
      return make_error(ErrorCode::InvalidRequest,
                        "is not a valid JSON Schema: multipleOf must be greater than 0 (at "
                        "/multipleOf)");
  }
  return {};
}

namespace {

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

}  // namespace

Result<void> rewrite_for_valijson(json::value& document,
                                  std::vector<std::unique_ptr<PatternProperties>>& rules) {
  return Rewriter(rules).run(document);
}

}  // namespace sb::clienttool
