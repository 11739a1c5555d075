#include "cc/gcsio/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace gcsio {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const Tables& T() {
  static const Tables tables;
  return tables;
}

// Slice-by-8 on the inverted register (crc ^ ~0 in, out).
uint32_t TableUpdate(uint32_t c, const uint8_t* p, size_t n) {
  const Tables& tb = T();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian x86_64 / aarch64
    w ^= c;
    c = tb.t[7][w & 0xFF] ^ tb.t[6][(w >> 8) & 0xFF] ^ tb.t[5][(w >> 16) & 0xFF] ^
        tb.t[4][(w >> 24) & 0xFF] ^ tb.t[3][(w >> 32) & 0xFF] ^ tb.t[2][(w >> 40) & 0xFF] ^
        tb.t[1][(w >> 48) & 0xFF] ^ tb.t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ tb.t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle, so one chain
// of them runs at a third of the possible speed: three blocks of kBlock bytes are summed at once
// (three independent chains) and joined with Shift, the register after kBlock zero bytes.
constexpr size_t kBlock = 4096;

__attribute__((target("sse4.2"))) uint64_t Chain(uint64_t c, const uint8_t* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  return c;
}

// Shift(r) = the register after feeding kBlock zero bytes to register r (linear in r: four
// byte tables built from the 32 basis registers).
struct ShiftTables {
  uint32_t t[4][256];
  ShiftTables() {
    static const uint8_t zeros[kBlock] = {};
    uint32_t basis[32];
    for (int i = 0; i < 32; ++i) basis[i] = static_cast<uint32_t>(Chain(1u << i, zeros, kBlock));
    for (int b = 0; b < 4; ++b) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if (v & (1u << bit)) r ^= basis[8 * b + bit];
        }
        t[b][v] = r;
      }
    }
  }
  uint32_t Shift(uint32_t r) const {
    return t[0][r & 0xFF] ^ t[1][(r >> 8) & 0xFF] ^ t[2][(r >> 16) & 0xFF] ^ t[3][r >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t HardwareUpdate(uint32_t c, const uint8_t* p, size_t n) {
  static const ShiftTables shift;
  uint64_t c64 = c;
  while (n >= 3 * kBlock) {
    uint64_t a = c64, b = 0, d = 0;
    const uint8_t* pb = p + kBlock;
    const uint8_t* pd = p + 2 * kBlock;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t wa, wb, wd;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, pb + i, 8);
      std::memcpy(&wd, pd + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      d = _mm_crc32_u64(d, wd);
    }
    // The register is affine in its start: after block 2 it is Shift(a) ^ b, and so on.
    c64 = shift.Shift(shift.Shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(d);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  c64 = Chain(c64, p, n);
  p += n & ~size_t{7};
  n &= 7;
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool DetectHardware() { return __builtin_cpu_supports("sse4.2"); }
#else
bool DetectHardware() { return false; }
#endif

}  // namespace

namespace {

// a * b modulo the polynomial, both in the reflected order (bit 31 is x^0).
uint32_t MultiplyModPoly(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 0x80000000u; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b >> 1) ^ ((b & 1) ? kPoly : 0);  // b *= x
  }
  return product;
}

// x^(2^k) modulo the polynomial for k = 0..63, by repeated squaring.
struct PowerTable {
  uint32_t p[64];
  PowerTable() {
    p[0] = 0x40000000u;  // x^1
    for (int k = 1; k < 64; ++k) p[k] = MultiplyModPoly(p[k - 1], p[k - 1]);
  }
};

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  static const PowerTable powers;
  // x^(8 * len_b): bit j of len_b contributes x^(2^(j + 3)).
  uint32_t shift = 0x80000000u;  // x^0
  for (int j = 0; len_b != 0 && j + 3 < 64; ++j, len_b >>= 1) {
    if (len_b & 1) shift = MultiplyModPoly(shift, powers.p[j + 3]);
  }
  return MultiplyModPoly(shift, crc_a) ^ crc_b;
}

bool Crc32cHardware() {
  static const bool has = DetectHardware();
  return has;
}

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~TableUpdate(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (Crc32cHardware()) return ~HardwareUpdate(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cPortable(data, n, crc);
}

std::string Crc32cBase64(uint32_t crc) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const uint8_t b[4] = {static_cast<uint8_t>(crc >> 24), static_cast<uint8_t>(crc >> 16),
                        static_cast<uint8_t>(crc >> 8), static_cast<uint8_t>(crc)};
  std::string out;
  out.push_back(kAlphabet[b[0] >> 2]);
  out.push_back(kAlphabet[((b[0] & 3) << 4) | (b[1] >> 4)]);
  out.push_back(kAlphabet[((b[1] & 15) << 2) | (b[2] >> 6)]);
  out.push_back(kAlphabet[b[2] & 63]);
  out.push_back(kAlphabet[b[3] >> 2]);
  out.push_back(kAlphabet[(b[3] & 3) << 4]);
  out += "==";
  return out;
}

bool ParseCrc32cBase64(const std::string& text, uint32_t* crc) {
  if (text.size() != 8 || text[6] != '=' || text[7] != '=') return false;
  uint32_t bits = 0;  // 36 bits of 6 characters hold 32 bits + 4 zero bits
  uint64_t acc = 0;
  for (int i = 0; i < 6; ++i) {
    const char c = text[i];
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+') {
      v = 62;
    } else if (c == '/') {
      v = 63;
    } else {
      return false;
    }
    acc = (acc << 6) | static_cast<uint64_t>(v);
  }
  if ((acc & 0xF) != 0) return false;  // the padding bits of a canonical encoding are zero
  bits = static_cast<uint32_t>(acc >> 4);
  *crc = bits;
  return true;
}

}  // namespace gcsio
