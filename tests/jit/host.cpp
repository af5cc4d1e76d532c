// An LLJIT host for tests/jit.rs: JIT-compiles IR files (clang-19 -S -emit-llvm with racewatch's C
// flags) and runs their functions, as an embedder would.
//
//   host [--no-plugin] [--no-debug] [--large-jit] COMMAND...
//
// --no-plugin   leave racewatch's ORC plugin out
// --no-debug    leave ORC's debugger support (GDB JIT interface registration) out
// --large-jit   build the object linking layer by hand (setObjectLinkingLayerCreator): LLJIT then keeps
//               the target's JIT default, the large code model on x86-64; without it LLJIT configures
//               JITLink with the small code model and the plugin is added to its layer afterwards
//
// Commands, run in order:
//   add JD FILE.ll        add the IR to JITDylib JD (created on first use) and run its initializers
//   run JD FUNC SECONDS   call `int FUNC(double)` of JD on this thread
//   bg JD FUNC SECONDS    the same on a new host thread
//   join                  wait for the host threads
//   classify JD FUNC      print the runtime's verdict on FUNC's first instruction (remembered by name)
//   remove JD             remove the JITDylib (its code, data and tables)
//   sleep SECONDS

#include "racewatch/orc.h"

#include "llvm/ExecutionEngine/Orc/Debugging/DebuggerSupport.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace llvm;
using namespace llvm::orc;

static ExitOnError ExitOnErr;

int main(int argc, char **argv) {
  InitializeNativeTarget();
  InitializeNativeTargetAsmPrinter();
  ExitOnErr.setBanner("host: ");

  bool plugin = true, debug = true, large = false;
  int i = 1;
  for (; i < argc && std::strncmp(argv[i], "--", 2) == 0; i++) {
    if (!std::strcmp(argv[i], "--no-plugin"))
      plugin = false;
    else if (!std::strcmp(argv[i], "--no-debug"))
      debug = false;
    else if (!std::strcmp(argv[i], "--large-jit"))
      large = true;
    else {
      std::fprintf(stderr, "host: unknown option %s\n", argv[i]);
      return 2;
    }
  }

  LLJITBuilder builder;
  if (large)
    builder.setObjectLinkingLayerCreator([plugin](ExecutionSession &ES, const Triple &) {
      auto layer = std::make_unique<ObjectLinkingLayer>(ES);
      if (plugin)
        layer->addPlugin(std::make_unique<racewatch::orc::Plugin>());
      return layer;
    });
  auto J = ExitOnErr(builder.create());
  if (debug)
    ExitOnErr(enableDebuggerSupport(*J));
  if (plugin && !large)
    cast<ObjectLinkingLayer>(J->getObjLinkingLayer()).addPlugin(std::make_unique<racewatch::orc::Plugin>());

  auto jd = [&](const std::string &name) -> JITDylib & {
    if (auto *existing = J->getJITDylibByName(name))
      return *existing;
    return ExitOnErr(J->createJITDylib(name));
  };
  auto function = [&](const std::string &dylib, const std::string &name) {
    return ExitOnErr(J->lookup(jd(dylib), name)).toPtr<int (*)(double)>();
  };
  std::vector<std::thread> threads;
  std::map<std::string, unsigned long> addresses;

  for (; i < argc; i++) {
    std::string cmd = argv[i];
    auto arg = [&](int k) -> std::string {
      if (i + k >= argc) {
        std::fprintf(stderr, "host: %s needs %d arguments\n", cmd.c_str(), k);
        std::exit(2);
      }
      return argv[i + k];
    };
    if (cmd == "add") {
      auto ctx = std::make_unique<LLVMContext>();
      SMDiagnostic diag;
      auto module = parseIRFile(arg(2), diag, *ctx);
      if (!module) {
        diag.print("host", errs());
        return 1;
      }
      JITDylib &dylib = jd(arg(1));
      ExitOnErr(J->addIRModule(dylib, ThreadSafeModule(std::move(module), std::move(ctx))));
      ExitOnErr(J->initialize(dylib));
      i += 2;
    } else if (cmd == "run" || cmd == "bg") {
      auto f = function(arg(1), arg(2));
      double seconds = std::atof(arg(3).c_str());
      if (cmd == "run")
        std::printf("%s -> %d\n", arg(2).c_str(), f(seconds));
      else
        threads.emplace_back([f, seconds] { f(seconds); });
      i += 3;
    } else if (cmd == "join") {
      for (auto &t : threads)
        t.join();
      threads.clear();
    } else if (cmd == "classify") {
      auto classify = reinterpret_cast<int (*)(unsigned long)>(dlsym(RTLD_DEFAULT, "__racewatch_classify"));
      std::string name = arg(2);
      if (J->getJITDylibByName(arg(1)))
        addresses[name] = reinterpret_cast<unsigned long>(function(arg(1), name));
      std::printf("classify %s %d\n", name.c_str(), classify ? classify(addresses[name]) : -1);
      i += 2;
    } else if (cmd == "remove") {
      ExitOnErr(J->getExecutionSession().removeJITDylib(jd(arg(1))));
      i += 1;
    } else if (cmd == "sleep") {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg(1).c_str())));
      i += 1;
    } else {
      std::fprintf(stderr, "host: unknown command %s\n", cmd.c_str());
      return 2;
    }
    std::fflush(stdout);
  }
  for (auto &t : threads)
    t.join();
  std::printf("done\n");
  return 0;
}
