//===- Json.cpp - the little JSON the trainer reads and writes ------------===//

#include "runtime/trainer/Json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace mtrt {

namespace {

class Parser {
public:
  explicit Parser(const std::string &s) : s_(s) {}

  JsonValue document() {
    JsonValue v = value(0);
    space();
    if (i_ != s_.size())
      error("trailing characters");
    return v;
  }

private:
  [[noreturn]] void error(const char *what) {
    throw std::runtime_error(std::string("invalid JSON: ") + what +
                             " at byte " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' ||
                              s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) {
      char msg[32];
      std::snprintf(msg, sizeof msg, "expected '%c'", c);
      error(msg);
    }
  }
  bool word(const char *w) {
    size_t n = std::char_traits<char>::length(w);
    if (s_.compare(i_, n, w) == 0) {
      i_ += n;
      return true;
    }
    return false;
  }

  JsonValue value(int depth) {
    if (depth > 64)
      error("nesting too deep");
    space();
    if (i_ >= s_.size())
      error("unexpected end");
    JsonValue v;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind = JsonValue::Object;
      if (eat('}'))
        return v;
      do {
        space();
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value(depth + 1));
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind = JsonValue::Array;
      if (eat(']'))
        return v;
      do
        v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = JsonValue::String;
      v.text = string();
    } else if (word("true")) {
      v.kind = JsonValue::Bool;
      v.boolean = true;
    } else if (word("false")) {
      v.kind = JsonValue::Bool;
    } else if (word("null")) {
      v.kind = JsonValue::Null;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Number;
      size_t start = i_;
      if (s_[i_] == '-')
        ++i_;
      while (i_ < s_.size() &&
             ((s_[i_] >= '0' && s_[i_] <= '9') || s_[i_] == '.' ||
              s_[i_] == 'e' || s_[i_] == 'E' || s_[i_] == '+' ||
              s_[i_] == '-'))
        ++i_;
      v.text = s_.substr(start, i_ - start);
      char *end = nullptr;
      std::strtod(v.text.c_str(), &end);
      if (v.text.empty() || *end != '\0')
        error("bad number");
    } else {
      error("unexpected character");
    }
    return v;
  }

  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"')
      error("expected a string");
    ++i_;
    std::string out;
    for (;;) {
      if (i_ >= s_.size())
        error("unterminated string");
      char c = s_[i_++];
      if (c == '"')
        return out;
      if (static_cast<unsigned char>(c) < 0x20)
        error("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size())
        error("unterminated escape");
      char e = s_[i_++];
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        unsigned cp = hex4();
        if (cp >= 0xd800 && cp < 0xdc00) { // a surrogate pair
          if (!word("\\u"))
            error("lone surrogate");
          unsigned lo = hex4();
          if (lo < 0xdc00 || lo >= 0xe000)
            error("bad surrogate pair");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        utf8(out, cp);
        break;
      }
      default:
        error("bad escape");
      }
    }
  }
  unsigned hex4() {
    if (i_ + 4 > s_.size())
      error("short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= unsigned(c - 'A' + 10);
      else
        error("bad \\u escape");
    }
    return v;
  }
  static void utf8(std::string &out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += char(0xe0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xf0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3f));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    }
  }

  const std::string &s_;
  size_t i_ = 0;
};

} // namespace

const JsonValue *JsonValue::find(const std::string &key) const {
  if (kind != Object)
    return nullptr;
  for (const auto &m : members)
    if (m.first == key)
      return &m.second;
  return nullptr;
}

int64_t JsonValue::as_int() const {
  if (kind != Number)
    throw std::runtime_error("expected an integer");
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno || *end != '\0')
    throw std::runtime_error("expected an integer, got " + text);
  return v;
}

double JsonValue::as_double() const {
  if (kind != Number)
    throw std::runtime_error("expected a number");
  return std::strtod(text.c_str(), nullptr);
}

const std::string &JsonValue::as_string() const {
  if (kind != String)
    throw std::runtime_error("expected a string");
  return text;
}

JsonValue parse_json(const std::string &text) {
  return Parser(text).document();
}

std::string json_quote(const std::string &s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_number(double x) {
  if (!std::isfinite(x))
    return "null";
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x)
      break;
  }
  return buf;
}

} // namespace mtrt
