// racewatch ORC plugin: hands the PC tables of JIT'd code to the racewatch runtime.
//
//   #include "racewatch/orc.h"
//   layer.addPlugin(std::make_unique<racewatch::orc::Plugin>());
//
// `layer` is an llvm::orc::ObjectLinkingLayer (LLJIT's, or a hand-built stack's). Header-only, built
// against LLVM 19 (Debian's llvm-19-dev). For each linked object the plugin
//
//  - keeps every `sanmd_*` section (sanmd_covered2, sanmd_atomics65538, ...: all versions, both code
//    models) alive through pruning: nothing in the object references them, so JITLink would drop them
//    (and resolve the constructor's `__start_`/`__stop_` symbols to 0);
//  - records their final addresses after fixups and, once the object is emitted (its memory
//    finalized, before any of its code or constructors run), registers each table with the runtime
//    through `__sanitizer_metadata_{covered,atomics}_add`; the runtime keys tables by their start, so
//    the module constructor's own registration of the same table is ignored;
//  - hands the runtime the object's named symbols (`__racewatch_jit_symbol_add`): function names for
//    stacks and global names for locations, even without debugger support;
//  - unregisters all of it when the object's resources are removed (a removed JITDylib or
//    ResourceTracker) and follows resources moved from one tracker to another.
//
// The runtime entry points are weak: without racewatch loaded they are null and the plugin only keeps
// the tables alive. For file:line in reports, also enable ORC's debugger support
// (llvm::orc::enableDebuggerSupport(LLJIT&)): racewatch reads the objects it registers through the
// GDB JIT interface.

#ifndef RACEWATCH_ORC_H
#define RACEWATCH_ORC_H

#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/JITLink/JITLink.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

extern "C" {
// The runtime's metadata callbacks (also what instrumented module constructors call).
__attribute__((weak)) void __sanitizer_metadata_covered_add(uint32_t version, const char *start, const char *end);
__attribute__((weak)) void __sanitizer_metadata_covered_del(uint32_t version, const char *start, const char *end);
__attribute__((weak)) void __sanitizer_metadata_atomics_add(uint32_t version, const char *start, const char *end);
__attribute__((weak)) void __sanitizer_metadata_atomics_del(uint32_t version, const char *start, const char *end);
// racewatch's symbol list for JIT'd code: [start, end) is named `name` (copied); flags bit 0: code.
__attribute__((weak)) void __racewatch_jit_symbol_add(uint64_t start, uint64_t end, const char *name,
                                                      uint32_t flags);
// Forgets every symbol starting in [start, end).
__attribute__((weak)) void __racewatch_jit_symbols_del(uint64_t start, uint64_t end);
}

namespace racewatch {
namespace orc {

/// One `sanmd_*` table at its final address.
struct Table {
  bool covered;     // sanmd_covered*, else sanmd_atomics*
  uint32_t version; // from the section name: 1, 2, 65538 (2 | 1 << 16), ...
  uint64_t start, end;
};

/// A named symbol of a linked object.
struct Symbol {
  uint64_t start, end;
  std::string name;
  bool code;
};

/// What one linked object gave the runtime.
struct Linked {
  std::vector<Table> tables;
  std::vector<Symbol> symbols;
  uint64_t low = UINT64_MAX, high = 0; // the symbols' span, for __racewatch_jit_symbols_del
};

/// Parses `sanmd_covered<V>` / `sanmd_atomics<V>` (no number: version 1). False for other sections.
inline bool parseTableName(llvm::StringRef name, bool &covered, uint32_t &version) {
  if (!name.consume_front("sanmd_"))
    return false;
  if (name.consume_front("covered"))
    covered = true;
  else if (name.consume_front("atomics"))
    covered = false;
  else
    return false;
  if (name.empty()) {
    version = 1;
    return true;
  }
  unsigned long long v = 0;
  if (name.getAsInteger(10, v) || v > UINT32_MAX)
    return false;
  version = static_cast<uint32_t>(v);
  return true;
}

class Plugin : public llvm::orc::ObjectLinkingLayer::Plugin {
public:
  /// `symbols`: also hand the runtime the objects' symbol names (cheap; on by default).
  explicit Plugin(bool symbols = true) : WithSymbols(symbols) {}

  void modifyPassConfig(llvm::orc::MaterializationResponsibility &MR, llvm::jitlink::LinkGraph &,
                        llvm::jitlink::PassConfiguration &Config) override {
    Config.PrePrunePasses.push_back([](llvm::jitlink::LinkGraph &G) {
      keepTablesAlive(G);
      return llvm::Error::success();
    });
    Config.PostFixupPasses.push_back([this, &MR](llvm::jitlink::LinkGraph &G) {
      Linked linked = collect(G, WithSymbols);
      if (!linked.tables.empty() || !linked.symbols.empty()) {
        std::lock_guard<std::mutex> lock(Mutex);
        InFlight[&MR] = std::move(linked);
      }
      return llvm::Error::success();
    });
  }

  llvm::Error notifyEmitted(llvm::orc::MaterializationResponsibility &MR) override {
    Linked linked;
    {
      std::lock_guard<std::mutex> lock(Mutex);
      auto it = InFlight.find(&MR);
      if (it == InFlight.end())
        return llvm::Error::success();
      linked = std::move(it->second);
      InFlight.erase(it);
    }
    // The memory is final (protections applied) and nothing of the object has run yet.
    add(linked);
    llvm::Error err = MR.withResourceKeyDo([&](llvm::orc::ResourceKey K) {
      std::lock_guard<std::mutex> lock(Mutex);
      Registered[K].push_back(linked);
    });
    if (err)
      remove(linked); // the tracker is gone: nobody will remove the object's resources through us
    return err;
  }

  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility &MR) override {
    std::lock_guard<std::mutex> lock(Mutex);
    InFlight.erase(&MR);
    return llvm::Error::success();
  }

  llvm::Error notifyRemovingResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey K) override {
    std::vector<Linked> gone;
    {
      std::lock_guard<std::mutex> lock(Mutex);
      auto it = Registered.find(K);
      if (it == Registered.end())
        return llvm::Error::success();
      gone = std::move(it->second);
      Registered.erase(it);
    }
    for (const Linked &linked : gone)
      remove(linked);
    return llvm::Error::success();
  }

  void notifyTransferringResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey DstKey,
                                   llvm::orc::ResourceKey SrcKey) override {
    std::lock_guard<std::mutex> lock(Mutex);
    auto it = Registered.find(SrcKey);
    if (it == Registered.end())
      return;
    std::vector<Linked> moved = std::move(it->second);
    Registered.erase(it);
    auto &dst = Registered[DstKey];
    for (Linked &linked : moved)
      dst.push_back(std::move(linked));
  }

  /// Marks every block of every `sanmd_*` section live (a pre-prune pass).
  static void keepTablesAlive(llvm::jitlink::LinkGraph &G) {
    for (auto &Sec : G.sections()) {
      bool covered;
      uint32_t version;
      if (!parseTableName(Sec.getName(), covered, version))
        continue;
      for (auto *B : Sec.blocks())
        G.addAnonymousSymbol(*B, 0, B->getSize(), false, true);
    }
  }

  /// The tables (contiguous blocks of one section merged) and named symbols of a linked graph.
  static Linked collect(llvm::jitlink::LinkGraph &G, bool withSymbols) {
    Linked linked;
    for (auto &Sec : G.sections()) {
      bool covered;
      uint32_t version;
      if (parseTableName(Sec.getName(), covered, version)) {
        std::vector<std::pair<uint64_t, uint64_t>> ranges;
        for (auto *B : Sec.blocks())
          if (B->getSize() > 0)
            ranges.push_back({B->getAddress().getValue(), B->getAddress().getValue() + B->getSize()});
        std::sort(ranges.begin(), ranges.end());
        for (auto &r : ranges) {
          Table *last = linked.tables.empty() ? nullptr : &linked.tables.back();
          if (last && last->covered == covered && last->version == version && last->end == r.first)
            last->end = r.second;
          else
            linked.tables.push_back(Table{covered, version, r.first, r.second});
        }
        continue;
      }
      if (!withSymbols)
        continue;
      bool code = (static_cast<unsigned>(Sec.getMemProt()) & static_cast<unsigned>(llvm::orc::MemProt::Exec)) != 0;
      for (auto *Sym : Sec.symbols()) {
        if (!Sym->hasName() || !Sym->isDefined())
          continue;
#if LLVM_VERSION_MAJOR >= 20
        if ((*Sym->getName()).starts_with(".L")) // assembler-local labels: constant pools, strings
#else
        if (Sym->getName().starts_with(".L"))
#endif
          continue;
        uint64_t start = Sym->getAddress().getValue();
        uint64_t size = Sym->getSize();
#if LLVM_VERSION_MAJOR >= 20
        std::string name = std::string(**Sym->getName());
#else
        std::string name = Sym->getName().str();
#endif
        linked.symbols.push_back(Symbol{start, start + size, std::move(name), code});
        linked.low = std::min(linked.low, start);
        linked.high = std::max(linked.high, start + (size ? size : 1));
      }
    }
    return linked;
  }

private:
  static void add(const Linked &linked) {
    for (const Table &t : linked.tables) {
      auto *fn = t.covered ? __sanitizer_metadata_covered_add : __sanitizer_metadata_atomics_add;
      if (fn)
        fn(t.version, reinterpret_cast<const char *>(t.start), reinterpret_cast<const char *>(t.end));
    }
    if (__racewatch_jit_symbol_add)
      for (const Symbol &s : linked.symbols)
        __racewatch_jit_symbol_add(s.start, s.end, s.name.c_str(), s.code ? 1 : 0);
  }

  static void remove(const Linked &linked) {
    for (const Table &t : linked.tables) {
      auto *fn = t.covered ? __sanitizer_metadata_covered_del : __sanitizer_metadata_atomics_del;
      if (fn)
        fn(t.version, reinterpret_cast<const char *>(t.start), reinterpret_cast<const char *>(t.end));
    }
    if (__racewatch_jit_symbols_del && linked.low < linked.high)
      __racewatch_jit_symbols_del(linked.low, linked.high);
  }

  bool WithSymbols;
  std::mutex Mutex;
  std::map<llvm::orc::MaterializationResponsibility *, Linked> InFlight;
  std::map<llvm::orc::ResourceKey, std::vector<Linked>> Registered;
};

} // namespace orc
} // namespace racewatch

#endif // RACEWATCH_ORC_H
