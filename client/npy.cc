#include "client/npy.h"

#include <cctype>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/file_io.h"

namespace qmm {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// Magic, two version bytes; the header length field follows (2 bytes in v1, 4 in v2/v3).
constexpr size_t kPreambleBytes = 8;
constexpr size_t kAlignment = 64;

struct DescrEntry {
  std::string_view code;  // kind and size, without the byte-order character
  ElementType type;
};

constexpr DescrEntry kDescrs[] = {
    {"f2", ElementType::kF16}, {"f4", ElementType::kF32}, {"f8", ElementType::kF64},
    {"i1", ElementType::kI8},  {"i2", ElementType::kI16}, {"i4", ElementType::kI32},
    {"i8", ElementType::kI64}, {"u1", ElementType::kU8},  {"u2", ElementType::kU16},
    {"u4", ElementType::kU32}, {"u8", ElementType::kU64},
};

absl::Status HeaderError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("npy header: ", what));
}

absl::StatusOr<ElementType> ParseDescr(absl::string_view descr) {
  if (descr.size() < 2) return HeaderError(absl::StrCat("unsupported dtype '", descr, "'"));
  const char order = descr[0];
  const std::string_view code(descr.data() + 1, descr.size() - 1);
  for (const DescrEntry& entry : kDescrs) {
    if (entry.code != code) continue;
    // Byte order means nothing for single bytes, so NumPy writes '|' there.
    if (ElementSize(entry.type) == 1 && (order == '|' || order == '<' || order == '>')) {
      return entry.type;
    }
    if (order == '<' || order == '=') return entry.type;
    if (order == '>') {
      return HeaderError(
          absl::StrCat("dtype '", descr, "' is big-endian; only little-endian data is read"));
    }
    break;
  }
  return HeaderError(absl::StrCat("unsupported dtype '", descr,
                                  "' (supported: <f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8)"));
}

absl::string_view DescrOf(ElementType t) {
  switch (t) {
    case ElementType::kF16:
      return "<f2";
    case ElementType::kF32:
      return "<f4";
    case ElementType::kF64:
      return "<f8";
    case ElementType::kI8:
      return "|i1";
    case ElementType::kI16:
      return "<i2";
    case ElementType::kI32:
      return "<i4";
    case ElementType::kI64:
      return "<i8";
    case ElementType::kU8:
      return "|u1";
    case ElementType::kU16:
      return "<u2";
    case ElementType::kU32:
      return "<u4";
    case ElementType::kU64:
      return "<u8";
    case ElementType::kBF16:
      break;
  }
  return "";
}

// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// This parser accepts exactly the literals NumPy writes there: quoted strings, True/False
// and tuples of non-negative integers (Python 2 writers add an 'L' suffix).
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  absl::Status Parse() {
    SkipSpace();
    if (!Consume('{')) return HeaderError("does not start with '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (!Consume(':')) return HeaderError(absl::StrCat("expected ':' after key '", *key, "'"));
      SkipSpace();
      absl::Status status = ParseValue(*key);
      if (!status.ok()) return status;
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume('}')) break;
      return HeaderError(absl::StrCat("expected ',' or '}' after the value of '", *key, "'"));
    }
    SkipSpace();
    if (pos_ != text_.size()) return HeaderError("unexpected text after the closing '}'");
    if (!descr_) return HeaderError("missing key 'descr'");
    if (!fortran_order_) return HeaderError("missing key 'fortran_order'");
    if (!shape_) return HeaderError("missing key 'shape'");
    return absl::OkStatus();
  }

  const std::string& descr() const { return *descr_; }
  bool fortran_order() const { return *fortran_order_; }
  const std::vector<int64_t>& shape() const { return *shape_; }

 private:
  absl::Status ParseValue(const std::string& key) {
    if (key == "descr") {
      if (descr_) return HeaderError("duplicate key 'descr'");
      if (Peek() == '[') return HeaderError("structured dtypes are not supported");
      if (Peek() != '\'' && Peek() != '"') return HeaderError("'descr' must be a string");
      absl::StatusOr<std::string> value = ParseString();
      if (!value.ok()) return value.status();
      descr_ = *std::move(value);
    } else if (key == "fortran_order") {
      if (fortran_order_) return HeaderError("duplicate key 'fortran_order'");
      if (ConsumeWord("True")) {
        fortran_order_ = true;
      } else if (ConsumeWord("False")) {
        fortran_order_ = false;
      } else {
        return HeaderError("'fortran_order' must be True or False");
      }
    } else if (key == "shape") {
      if (shape_) return HeaderError("duplicate key 'shape'");
      absl::StatusOr<std::vector<int64_t>> shape = ParseTuple();
      if (!shape.ok()) return shape.status();
      shape_ = *std::move(shape);
    } else {
      return HeaderError(absl::StrCat("unexpected key '", key, "'"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ParseString() {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return HeaderError("expected a quoted string");
    ++pos_;
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return HeaderError("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }

  absl::StatusOr<std::vector<int64_t>> ParseTuple() {
    if (!Consume('(')) return HeaderError("'shape' must be a tuple");
    std::vector<int64_t> dims;
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        return HeaderError("'shape' must hold non-negative integers");
      }
      int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        const int digit = text_[pos_++] - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          return HeaderError("a 'shape' dimension does not fit in int64");
        }
        value = value * 10 + digit;
      }
      Consume('L');
      dims.push_back(value);
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume(')')) break;
      return HeaderError("expected ',' or ')' in 'shape'");
    }
    return dims;
  }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  bool ConsumeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::optional<std::string> descr_;
  std::optional<bool> fortran_order_;
  std::optional<std::vector<int64_t>> shape_;
};

uint32_t LoadLittleEndian(const uint8_t* p, int bytes) {
  uint32_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::Status WithPath(const absl::Status& status, const std::string& path) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

}  // namespace

absl::StatusOr<NdArray> ParseNpy(std::span<const uint8_t> bytes) {
  if (bytes.size() < kMagic.size() ||
      std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    return absl::InvalidArgumentError("not a .npy file (the magic string \\x93NUMPY is missing)");
  }
  if (bytes.size() < kPreambleBytes) {
    return absl::InvalidArgumentError("npy file truncated inside its version bytes");
  }
  const int major = bytes[6];
  const int minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported npy format version ", major, ".",
                                                   minor, " (supported: 1.0, 2.0, 3.0)"));
  }
  const int length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < kPreambleBytes + length_bytes) {
    return absl::InvalidArgumentError("npy file truncated inside its header length");
  }
  const size_t header_length = LoadLittleEndian(bytes.data() + kPreambleBytes, length_bytes);
  const size_t data_offset = kPreambleBytes + length_bytes + header_length;
  if (data_offset > bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy file truncated: the header says it is ", header_length, " bytes long but only ",
        bytes.size() - kPreambleBytes - length_bytes, " bytes follow"));
  }
  // Version 1 and 2 headers are latin-1, version 3 utf-8; the keys and values we accept
  // are plain ASCII either way.
  HeaderParser parser(std::string_view(
      reinterpret_cast<const char*>(bytes.data() + kPreambleBytes + length_bytes), header_length));
  if (absl::Status status = parser.Parse(); !status.ok()) return status;
  if (parser.fortran_order()) {
    return absl::InvalidArgumentError(
        "npy header: fortran_order is True; only C-order arrays are read "
        "(save np.ascontiguousarray(a))");
  }
  absl::StatusOr<ElementType> type = ParseDescr(parser.descr());
  if (!type.ok()) return type.status();
  absl::StatusOr<int64_t> count = CheckedElementCount(parser.shape(), ElementSize(*type));
  if (!count.ok()) return HeaderError(count.status().message());
  const int64_t expected = *count * static_cast<int64_t>(ElementSize(*type));
  const size_t actual = bytes.size() - data_offset;
  if (static_cast<uint64_t>(expected) != actual) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy data is ", actual, " bytes but shape ", ShapeString(parser.shape()),
                     " of ", parser.descr(), " needs ", expected,
                     actual < static_cast<uint64_t>(expected) ? " (truncated file)" : ""));
  }
  NdArray a;
  a.type = *type;
  a.shape = parser.shape();
  a.data.assign(bytes.begin() + static_cast<ptrdiff_t>(data_offset), bytes.end());
  return a;
}

absl::StatusOr<std::vector<uint8_t>> SerializeNpy(const NdArray& a) {
  const absl::string_view descr = DescrOf(a.type);
  if (descr.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("a .npy file cannot hold ",
                                                   std::string(ElementTypeName(a.type)),
                                                   " (convert to f32 first)"));
  }
  absl::StatusOr<int64_t> count = CheckedElementCount(a.shape, ElementSize(a.type));
  if (!count.ok()) return count.status();
  if (static_cast<uint64_t>(*count) * ElementSize(a.type) != a.data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("array data is ", a.data.size(), " bytes but shape ", ShapeString(a.shape),
                     " of ", std::string(ElementTypeName(a.type)), " needs ",
                     *count * static_cast<int64_t>(ElementSize(a.type))));
  }
  std::string header = absl::StrCat(
      "{'descr': '", descr, "', 'fortran_order': False, 'shape': ", ShapeString(a.shape), ", }");
  // Pad with spaces and end with '\n' so that the data starts on a 64-byte boundary.
  int length_bytes = 2;
  size_t unpadded = kPreambleBytes + length_bytes + header.size() + 1;
  size_t padded = (unpadded + kAlignment - 1) / kAlignment * kAlignment;
  if (padded - kPreambleBytes - length_bytes > 0xffff) {
    length_bytes = 4;
    unpadded = kPreambleBytes + length_bytes + header.size() + 1;
    padded = (unpadded + kAlignment - 1) / kAlignment * kAlignment;
  }
  header.append(padded - unpadded, ' ');
  header.push_back('\n');

  std::vector<uint8_t> out;
  out.reserve(padded + a.data.size());
  out.insert(out.end(), kMagic.begin(), kMagic.end());
  out.push_back(length_bytes == 2 ? 1 : 2);
  out.push_back(0);
  for (int i = 0; i < length_bytes; ++i) {
    out.push_back(static_cast<uint8_t>((header.size() >> (8 * i)) & 0xff));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

absl::StatusOr<NdArray> ReadNpy(const std::string& path) {
  absl::StatusOr<std::vector<uint8_t>> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<NdArray> a = ParseNpy(*bytes);
  if (!a.ok()) return WithPath(a.status(), path);
  return a;
}

absl::Status WriteNpy(const std::string& path, const NdArray& a) {
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeNpy(a);
  if (!bytes.ok()) return WithPath(bytes.status(), path);
  return WriteFile(path, *bytes);
}

}  // namespace qmm
