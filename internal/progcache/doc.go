// Package progcache keeps the programs XLA compiles on disk, so that a restarted
// process loads them instead of compiling again, and counts what compiling costs.
//
// It sits under the xla package, between GoMLX and the PJRT plugin. GoMLX v0.26.0 and
// its go-xla v0.1.4 compile through the plugin's PJRT_Client_Compile and wrap neither
// PJRT_Executable_Serialize nor PJRT_Executable_DeserializeAndLoad, and keep the
// plugin's API table to themselves. So Install finds that table (the plugin is loaded
// once per process; dlopen with RTLD_NOLOAD returns the same library) and puts a hook
// in the place of PJRT_Client_Compile: every compile, whoever asks for it, passes
// through the hook, which
//
//   - looks the program up by its key: sha256 of the program (format and bytes), the
//     compile options (device assignment, replicas), the plugin's identity (its
//     attributes and version, the library file), XLA_FLAGS and the host CPU;
//   - on a hit, checks the entry (magic, key, identity, length, sha256 of the payload)
//     and loads it with PJRT_Executable_DeserializeAndLoad; an entry that fails any
//     check, or that the plugin refuses, is removed and the program compiled: an entry
//     is never trusted;
//   - on a miss, compiles, serializes the executable and writes it durably (temp file,
//     fsync, rename), then evicts the least recently used entries beyond the size limit.
//
// Compiles and loads are counted (Snapshot) whether or not a directory is set, so
// status can show compile time apart from work.
package progcache
