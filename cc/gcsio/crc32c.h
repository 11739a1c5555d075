// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum GCS keeps for every object
// (the object resource's `crc32c`: base64 of the big-endian 4 bytes).
//
// Why our own (~150 lines): Debian 12 packages no crc32c or absl-crc library for C++, and the
// uploader needs the checksum of caller memory with the GIL released. It uses the SSE4.2 `crc32`
// instruction (chosen at run time with __builtin_cpu_supports) on three interleaved 4 KiB blocks
// joined by a zero-block shift table, else a slice-by-8 table. Three chains run about as fast
// as google-crc32c's C extension: a few ms per data object (crc32c_test's ThroughputIsPrinted;
// figures in docs/measurements.md, "CRC-32C").
#ifndef CC_GCSIO_CRC32C_H_
#define CC_GCSIO_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace gcsio {

// CRC-32C of `n` bytes at `data`, continuing from `crc` (the CRC-32C of the bytes before them;
// 0 to start): Crc32c(b, Crc32c(a)) == Crc32c(a + b).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The same with the table path only (tests compare both paths).
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

// The CRC-32C of a + b from crc_a = Crc32c(a), crc_b = Crc32c(b) and b's length (bytes), without
// reading the bytes again: crc_a times x^(8 * len_b) modulo the polynomial, plus crc_b (CRC-32C is
// linear in its register). About 64 register multiplications: blocks are checksummed once and
// the whole object's CRC-32C follows from them.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// True when Crc32c uses the SSE4.2 instruction on this CPU.
bool Crc32cHardware();

// GCS's text form: base64 of the big-endian 4 bytes, e.g. 0xE3069283 -> "4waSgw==".
std::string Crc32cBase64(uint32_t crc);

// The inverse; false for anything that is not 4 bytes of base64.
bool ParseCrc32cBase64(const std::string& text, uint32_t* crc);

}  // namespace gcsio

#endif  // CC_GCSIO_CRC32C_H_
