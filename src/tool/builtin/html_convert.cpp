#include "tool/builtin/html_convert.hpp"

#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include <boost/url.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "util/text.hpp"

namespace sb::tool {

namespace {

enum class Style { Text, Markdown };

std::string_view name_of(const xmlNode* n) {
  return n->name ? std::string_view(reinterpret_cast<const char*>(n->name)) : std::string_view();
}

std::string attribute(const xmlNode* n, const char* name) {
  xmlChar* v = xmlGetProp(n, reinterpret_cast<const xmlChar*>(name));
  if (!v) return {};
  std::string out(reinterpret_cast<const char*>(v));
  xmlFree(v);
  return out;
}

bool has_attribute(const xmlNode* n, const char* name) {
  return xmlHasProp(n, reinterpret_cast<const xmlChar*>(name)) != nullptr;
}

template <std::size_t N>
bool one_of(std::string_view name, const std::array<std::string_view, N>& names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Never rendered: not visible, or not text a reader of the page would see.
constexpr std::array<std::string_view, 22> kHidden = {
    "head",  "script", "style", "noscript", "template", "iframe",  "object", "embed",
    "svg",   "canvas", "math",  "select",   "option",   "button",  "input",  "textarea",
    "audio", "video",  "map",   "link",     "meta",     "datalist"};

// Elements that start and end a line of their own (paragraph-like ones get a blank line: see
// element()).
constexpr std::array<std::string_view, 27> kBlocks = {
    "address", "article", "aside",  "body",    "center",   "details", "dialog",
    "div",     "dl",      "dt",     "dd",      "fieldset", "figure",  "figcaption",
    "footer",  "form",    "header", "hgroup",  "html",     "main",    "nav",
    "section", "summary", "legend", "caption", "frameset", "noframes"};

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Length of the whitespace at s[i] (a no-break space U+00A0 counts: it is whitespace a reader
// sees as a space, and models do not need to tell the two apart); 0 when there is none.
std::size_t space_at(std::string_view s, std::size_t i) {
  if (is_space_byte(s[i])) return 1;
  if (s[i] == '\xC2' && i + 1 < s.size() && s[i + 1] == '\xA0') return 2;
  return 0;
}

// Whitespace runs (newlines included) become one space; no space at either end.
std::string collapse(std::string_view s) {
  std::string out;
  bool space = false;
  for (std::size_t i = 0; i < s.size();) {
    if (std::size_t n = space_at(s, i)) {
      space = !out.empty();
      i += n;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(s[i++]);
  }
  return out;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return ascii_iequals(s.substr(0, prefix.size()), prefix);
}

// The text of a subtree as written: for <pre> and inline <code>.
void raw_text(const xmlNode* n, std::string& out) {
  for (const xmlNode* c = n->children; c; c = c->next) {
    if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) {
      if (c->content) out += reinterpret_cast<const char*>(c->content);
    } else if (c->type == XML_ELEMENT_NODE) {
      auto name = name_of(c);
      if (name == "br") {
        out.push_back('\n');
      } else if (!one_of(name, kHidden)) {
        raw_text(c, out);
        // Code viewers put each line of code in a block of its own.
        if ((name == "div" || name == "p" || name == "li" || name == "tr") && !out.empty() &&
            out.back() != '\n')
          out.push_back('\n');
      }
    }
  }
}

bool has_descendant(const xmlNode* n, std::string_view name) {
  for (const xmlNode* c = n->children; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE && (name_of(c) == name || has_descendant(c, name))) return true;
  return false;
}

const xmlNode* find_element(const xmlNode* n, std::string_view name) {
  for (const xmlNode* c = n->children; c; c = c->next) {
    if (c->type != XML_ELEMENT_NODE) continue;
    if (name_of(c) == name) return c;
    if (const xmlNode* found = find_element(c, name)) return found;
  }
  return nullptr;
}

// A fenced code block's info string: the x of class="language-x" (or "lang-x") on <pre> or on
// its <code>, reduced to characters that cannot break the fence line.
std::string code_language(const xmlNode* pre) {
  std::vector<const xmlNode*> candidates{pre};
  for (const xmlNode* c = pre->children; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE && name_of(c) == "code") candidates.push_back(c);
  for (const xmlNode* n : candidates) {
    std::string cls = attribute(n, "class");
    std::size_t i = 0;
    while (i < cls.size()) {
      while (i < cls.size() && is_space_byte(cls[i]))
        ++i;
      std::size_t j = i;
      while (j < cls.size() && !is_space_byte(cls[j]))
        ++j;
      std::string_view token(cls.data() + i, j - i);
      for (std::string_view prefix : {"language-", "lang-"}) {
        if (token.substr(0, prefix.size()) != prefix) continue;
        std::string lang;
        for (char ch : token.substr(prefix.size()))
          if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '+' || ch == '-' || ch == '_' ||
              ch == '#' || ch == '.')
            lang.push_back(ch);
        if (!lang.empty()) return lang;
      }
      i = j;
    }
  }
  return {};
}

// Markdown link destinations end at whitespace or an unbalanced parenthesis.
std::string escape_destination(std::string_view url) {
  std::string out;
  for (char c : url) {
    if (c == ' ')
      out += "%20";
    else if (c == '(')
      out += "%28";
    else if (c == ')')
      out += "%29";
    else if (c == '<')
      out += "%3C";
    else if (c == '>')
      out += "%3E";
    else if (c != '\n' && c != '\r' && c != '\t')
      out.push_back(c);
  }
  return out;
}

// A rendered piece of inline content (link text, emphasis), with whether the source had
// whitespace around it, which decides the spaces around it in the enclosing text.
struct Inline {
  std::string text;
  bool leading_space = false;
  bool trailing_space = false;
};

// Renders a tree into lines. Content goes through emit(); block elements ask for line breaks
// with block(n) (n = 1: a new line, 2: a blank line), which are only written when more content
// follows, so that nested blocks never pile up empty lines. Lines inside block quotes and list
// items start with a prefix per level ("> ", "- " on the first line of an item and "  " after).
class Renderer {
 public:
  Renderer(Style style, const boost::urls::url* base) : style_(style), base_(base) {}

  void children(const xmlNode* n) {
    for (const xmlNode* c = n->children; c; c = c->next)
      node(c);
  }

  std::string finish() {
    // Per line: no trailing blanks (prefixes of empty lines, spaces before a <br>).
    std::string out;
    std::size_t start = 0;
    while (start <= out_.size()) {
      std::size_t end = out_.find('\n', start);
      if (end == std::string::npos) end = out_.size();
      std::string_view line(out_.data() + start, end - start);
      while (!line.empty() && (line.back() == ' ' || line.back() == '\t'))
        line.remove_suffix(1);
      out.append(line);
      if (end < out_.size()) out.push_back('\n');
      start = end + 1;
    }
    while (!out.empty() && out.back() == '\n')
      out.pop_back();
    std::size_t first = out.find_first_not_of('\n');
    return first == std::string::npos ? std::string() : out.substr(first);
  }

  bool leading_space() const { return leading_space_; }
  bool trailing_space() const { return pending_space_; }

 private:
  struct Level {
    std::string first;  // the prefix of the level's first line ("- ", "1. ", "> ")
    std::string rest;   // of the lines after it
    bool first_pending = true;
  };
  struct List {
    bool ordered = false;
    long next = 1;
  };

  bool markdown() const { return style_ == Style::Markdown; }
  // Markdown's line-based syntax (headings, quotes, list markers, fences, table pipes) only
  // works at the start of a line: inside link text or a heading, blocks are plain text.
  bool markdown_blocks() const { return markdown() && !flat_; }

  void node(const xmlNode* n) {
    if (n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) {
      if (n->content) text(reinterpret_cast<const char*>(n->content));
    } else if (n->type == XML_ELEMENT_NODE) {
      element(n);
    }
  }

  void element(const xmlNode* n) {
    auto name = name_of(n);
    if (one_of(name, kHidden) || has_attribute(n, "hidden")) return;
    if (name == "br") {
      if (!out_.empty()) breaks_ = std::min(breaks_ + 1, 2);
      pending_space_ = false;
    } else if (name == "hr") {
      block(2);
      if (markdown_blocks()) emit("---");
      block(2);
    } else if (name.size() == 2 && name[0] == 'h' && name[1] >= '1' && name[1] <= '6') {
      block(2);
      if (markdown_blocks()) {
        Inline heading = render_inline(n);
        if (!heading.text.empty())
          emit(std::string(static_cast<std::size_t>(name[1] - '0'), '#') + " " + heading.text);
      } else {
        children(n);
      }
      block(2);
    } else if (name == "p") {
      block(2);
      children(n);
      block(2);
    } else if (name == "pre") {
      preformatted(n);
    } else if (name == "blockquote") {
      block(2);
      if (markdown_blocks()) levels_.push_back({"> ", "> "});
      children(n);
      if (markdown_blocks()) levels_.pop_back();
      block(2);
    } else if (name == "ul" || name == "ol" || name == "menu" || name == "dir") {
      list(n, name == "ol");
    } else if (name == "li") {
      list_item(n);
    } else if (name == "table") {
      table(n);
    } else if (name == "a") {
      link(n);
    } else if (name == "img") {
      image(n);
    } else if (markdown() && (name == "strong" || name == "b")) {
      emit_inline(render_inline(n), "**", "**");
    } else if (markdown() && (name == "em" || name == "i")) {
      emit_inline(render_inline(n), "*", "*");
    } else if (markdown() && (name == "del" || name == "s" || name == "strike")) {
      emit_inline(render_inline(n), "~~", "~~");
    } else if (markdown() && (name == "code" || name == "kbd" || name == "samp" || name == "tt")) {
      inline_code(n);
    } else if (one_of(name, kBlocks)) {
      block(1);
      children(n);
      block(1);
    } else {
      children(n);  // inline elements (span, abbr, ...) and ones we do not know
    }
  }

  // ---- output primitives ----

  void text(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
      if (std::size_t n = space_at(s, i)) {
        space();
        i += n;
        continue;
      }
      std::size_t j = i;
      while (j < s.size() && !space_at(s, j))
        ++j;
      emit(s.substr(i, j - i));
      i = j;
    }
  }

  void space() {
    if (out_.empty()) leading_space_ = true;
    pending_space_ = true;
  }

  void block(int newlines) {
    if (!out_.empty()) breaks_ = std::max(breaks_, newlines);
    pending_space_ = false;
  }

  // Writes the pending line breaks (or space) and the line prefix, for content that follows.
  void begin_content() {
    if (out_.empty()) {
      write_prefix();
    } else if (breaks_ > 0) {
      for (int i = 0; i < breaks_; ++i) {
        if (i > 0) out_ += blank_prefix();
        out_.push_back('\n');
      }
      write_prefix();
    } else if (pending_space_) {
      out_.push_back(' ');
    }
    breaks_ = 0;
    pending_space_ = false;
  }

  void emit(std::string_view s) {
    if (s.empty()) return;
    begin_content();
    out_.append(s);
  }

  // A new line right now (inside <pre> and tables, whose lines are not reflowed).
  void hard_line() {
    out_.push_back('\n');
    write_prefix();
  }

  void write_prefix() {
    for (auto& level : levels_) {
      out_ += level.first_pending ? level.first : level.rest;
      level.first_pending = false;
    }
  }

  std::string blank_prefix() const {
    std::string p;
    for (const auto& level : levels_)
      p += level.rest;
    while (!p.empty() && p.back() == ' ')
      p.pop_back();
    return p;
  }

  Inline render_inline(const xmlNode* n) const {
    Renderer sub(style_, base_);
    sub.flat_ = true;
    sub.children(n);
    Inline out;
    out.leading_space = sub.leading_space();
    out.trailing_space = sub.trailing_space();
    out.text = collapse(sub.finish());
    return out;
  }

  void emit_inline(const Inline& piece, std::string_view open, std::string_view close) {
    if (piece.leading_space) space();
    if (!piece.text.empty()) {
      std::string s;
      s.reserve(open.size() + piece.text.size() + close.size());
      s.append(open).append(piece.text).append(close);
      emit(s);
    }
    if (piece.trailing_space) space();
  }

  // ---- elements ----

  void preformatted(const xmlNode* n) {
    std::string raw;
    raw_text(n, raw);
    std::string code;
    code.reserve(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i)
      if (!(raw[i] == '\r' && i + 1 < raw.size() && raw[i + 1] == '\n')) code.push_back(raw[i]);
    // A newline right after <pre> is not content (HTML's rule); trailing ones are layout.
    if (!code.empty() && code.front() == '\n') code.erase(0, 1);
    while (!code.empty() && (code.back() == '\n' || code.back() == ' ' || code.back() == '\t'))
      code.pop_back();
    if (code.empty() && !markdown_blocks()) return;

    std::vector<std::string_view> lines;
    for (std::size_t start = 0;;) {
      std::size_t end = code.find('\n', start);
      lines.emplace_back(code.data() + start,
                         (end == std::string::npos ? code.size() : end) - start);
      if (end == std::string::npos) break;
      start = end + 1;
    }
    block(2);
    begin_content();
    if (markdown_blocks()) {
      // The fence must be longer than any run of backticks in the code.
      std::size_t longest = 0, run = 0;
      for (char c : code) {
        run = c == '`' ? run + 1 : 0;
        longest = std::max(longest, run);
      }
      std::string fence(std::max<std::size_t>(3, longest + 1), '`');
      out_ += fence + code_language(n);
      for (auto line : lines) {
        hard_line();
        out_.append(line);
      }
      hard_line();
      out_ += fence;
    } else {
      for (std::size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) hard_line();
        out_.append(lines[i]);
      }
    }
    block(2);
  }

  void inline_code(const xmlNode* n) {
    std::string raw;
    raw_text(n, raw);
    Inline piece;
    piece.leading_space = !raw.empty() && space_at(raw, 0);
    piece.trailing_space = !raw.empty() && is_space_byte(raw.back());
    piece.text = collapse(raw);
    if (piece.text.find('`') == std::string::npos)
      emit_inline(piece, "`", "`");
    else
      emit_inline(piece, "`` ", " ``");
  }

  void list(const xmlNode* n, bool ordered) {
    block(lists_.empty() ? 2 : 1);
    List l;
    l.ordered = ordered;
    if (ordered) {
      std::string start = attribute(n, "start");
      char* end = nullptr;
      long v = std::strtol(start.c_str(), &end, 10);
      if (!start.empty() && end && *end == '\0') l.next = v;
    }
    lists_.push_back(l);
    children(n);
    lists_.pop_back();
    block(lists_.empty() ? 2 : 1);
  }

  void list_item(const xmlNode* n) {
    block(1);
    if (markdown_blocks()) {
      std::string marker = "- ";
      if (!lists_.empty() && lists_.back().ordered)
        marker = std::to_string(lists_.back().next++) + ". ";
      levels_.push_back({marker, std::string(marker.size(), ' ')});
      children(n);
      levels_.pop_back();
    } else {
      children(n);
    }
    block(1);
  }

  void table(const xmlNode* n) {
    std::vector<const xmlNode*> rows;
    for (const xmlNode* c = n->children; c; c = c->next) {
      if (c->type != XML_ELEMENT_NODE) continue;
      auto name = name_of(c);
      if (name == "tr") {
        rows.push_back(c);
      } else if (name == "thead" || name == "tbody" || name == "tfoot") {
        for (const xmlNode* r = c->children; r; r = r->next)
          if (r->type == XML_ELEMENT_NODE && name_of(r) == "tr") rows.push_back(r);
      } else if (name == "caption") {
        block(1);
        children(c);
        block(1);
      }
    }
    auto cells_of = [](const xmlNode* row) {
      std::vector<const xmlNode*> cells;
      for (const xmlNode* c = row->children; c; c = c->next)
        if (c->type == XML_ELEMENT_NODE && (name_of(c) == "td" || name_of(c) == "th"))
          cells.push_back(c);
      return cells;
    };
    std::size_t columns = 0;
    for (const xmlNode* row : rows)
      columns = std::max(columns, cells_of(row).size());
    // Tables used for page layout (one column, or tables inside tables) are not data: their
    // cells are rendered as the blocks they are.
    if (columns <= 1 || has_descendant(n, "table")) {
      block(1);
      for (const xmlNode* row : rows)
        for (const xmlNode* cell : cells_of(row)) {
          block(1);
          children(cell);
          block(1);
        }
      block(1);
      return;
    }
    block(2);
    bool first = true;
    for (const xmlNode* row : rows) {
      std::vector<std::string> texts;
      for (const xmlNode* cell : cells_of(row)) {
        std::string t = render_inline(cell).text;
        if (markdown_blocks()) {
          std::string escaped;
          for (char c : t) {
            if (c == '|') escaped.push_back('\\');
            escaped.push_back(c);
          }
          t = std::move(escaped);
        }
        texts.push_back(std::move(t));
      }
      if (markdown_blocks()) {
        texts.resize(columns);
        std::string line = "|";
        for (const auto& t : texts)
          line += " " + t + " |";
        if (first) {
          begin_content();
          out_ += line;
          hard_line();
          out_ += "|";
          for (std::size_t i = 0; i < columns; ++i)
            out_ += " --- |";
        } else {
          hard_line();
          out_ += line;
        }
      } else {
        std::string line;
        for (std::size_t i = 0; i < texts.size(); ++i)
          line += (i ? "\t" : "") + texts[i];
        block(1);
        emit(line);
        block(1);
      }
      first = false;
    }
    block(2);
  }

  std::string resolve(std::string_view reference) const {
    if (!base_) return std::string(reference);
    auto ref = boost::urls::parse_uri_reference(reference);
    if (!ref) return std::string(reference);
    boost::urls::url out;
    if (!boost::urls::resolve(*base_, *ref, out)) return std::string(reference);
    return std::string(out.buffer());
  }

  void link(const xmlNode* n) {
    if (!markdown()) {
      children(n);
      return;
    }
    Inline label = render_inline(n);
    std::string href = collapse(attribute(n, "href"));
    if (href.empty() || starts_with_ci(href, "javascript:") || label.text.empty()) {
      emit_inline(label, "", "");
      return;
    }
    emit_inline(label, "[", "](" + escape_destination(resolve(href)) + ")");
  }

  void image(const xmlNode* n) {
    if (!markdown()) return;
    std::string src = collapse(attribute(n, "src"));
    // Lazy-loading pages keep the real source aside; inline data is useless to a model.
    if (src.empty() || starts_with_ci(src, "data:")) src = collapse(attribute(n, "data-src"));
    if (src.empty() || starts_with_ci(src, "data:")) return;
    std::string alt = collapse(attribute(n, "alt"));
    std::replace(alt.begin(), alt.end(), ']', ')');
    std::replace(alt.begin(), alt.end(), '[', '(');
    emit("![" + alt + "](" + escape_destination(resolve(src)) + ")");
  }

  Style style_;
  const boost::urls::url* base_;
  std::string out_;
  int breaks_ = 0;
  bool pending_space_ = false;
  bool leading_space_ = false;
  bool flat_ = false;  // renders inline content (see markdown_blocks())
  std::vector<Level> levels_;
  std::vector<List> lists_;
};

struct DocDeleter {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};
using DocPtr = std::unique_ptr<xmlDoc, DocDeleter>;

DocPtr parse_html(std::string_view html, const HtmlConvertOptions& options) {
  static std::once_flag once;
  // libxml2 must be initialised once before threads use it concurrently.
  std::call_once(once, [] { xmlInitParser(); });
  if (html.empty() || html.size() > static_cast<std::size_t>(INT_MAX)) return nullptr;
  std::string encoding = options.charset;
  // Without a declared charset libxml2 assumes Latin-1 until a <meta charset> says otherwise;
  // most pages are UTF-8, and bytes that are valid UTF-8 almost never are meant as Latin-1.
  if (encoding.empty() && is_valid_utf8(html)) encoding = "UTF-8";
  // NONET: never fetch a DTD or anything else from the network while parsing.
  int flags = HTML_PARSE_RECOVER | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET;
  // An encoding libxml2 does not know is ignored by it (the page is then sniffed).
  return DocPtr(htmlReadMemory(html.data(), static_cast<int>(html.size()),
                               options.base_url.empty() ? nullptr : options.base_url.c_str(),
                               encoding.empty() ? nullptr : encoding.c_str(), flags));
}

std::string render(std::string_view html, const HtmlConvertOptions& options, Style style) {
  DocPtr doc = parse_html(html, options);
  if (!doc) return {};
  const xmlNode* root = reinterpret_cast<const xmlNode*>(doc.get());
  std::optional<boost::urls::url> base;
  if (auto parsed = boost::urls::parse_absolute_uri(options.base_url)) base.emplace(*parsed);
  // <base href> changes what relative links are relative to.
  if (const xmlNode* base_element = find_element(root, "base")) {
    std::string href = attribute(base_element, "href");
    auto ref = boost::urls::parse_uri_reference(href);
    if (!href.empty() && ref) {
      if (base) {
        boost::urls::url resolved;
        if (boost::urls::resolve(*base, *ref, resolved)) base = std::move(resolved);
      } else if (auto absolute = boost::urls::parse_absolute_uri(href)) {
        base.emplace(*absolute);
      }
    }
  }
  Renderer renderer(style, base ? &*base : nullptr);
  renderer.children(root);
  return renderer.finish();
}

}  // namespace

std::string html_to_text(std::string_view html, const HtmlConvertOptions& options) {
  return render(html, options, Style::Text);
}

std::string html_to_markdown(std::string_view html, const HtmlConvertOptions& options) {
  return render(html, options, Style::Markdown);
}

bool looks_like_html(std::string_view body) {
  if (body.substr(0, 3) == "\xEF\xBB\xBF") body.remove_prefix(3);
  while (!body.empty() && is_space_byte(body.front()))
    body.remove_prefix(1);
  for (std::string_view start : {"<!doctype html", "<html", "<head", "<body"})
    if (starts_with_ci(body, start)) return true;
  return false;
}

}  // namespace sb::tool
