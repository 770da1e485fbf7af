//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package kvhash

// nativeLittleEndian is true on hosts whose uint32 memory layout is
// little-endian, where token slices are hashed in place.
const nativeLittleEndian = true
