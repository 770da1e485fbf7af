//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package kvhash

// nativeLittleEndian is false on hosts that are (or may be) big-endian, where
// tokens are encoded explicitly before hashing.
const nativeLittleEndian = false
