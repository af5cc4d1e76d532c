//! Static evidence of seccomp filters (and `SIGTRAP` handlers) installed behind racewatch's back.
//!
//! A thread that installs a seccomp filter with a `syscall` instruction of its own (inline assembly,
//! as sandbox libraries do) passes none of the libc functions racewatch interposes (`prctl`,
//! `syscall`), and the kernel gives a thread no way to learn its own filter without a system call —
//! which the filter may answer with `SIGSYS` (racewatch's handler holds every signal: the process is
//! killed), `SIGKILL` or an error. So racewatch must know before such a thread can be sampled: the
//! executable segments of the loaded modules (except libc, the dynamic loader, the vDSO and
//! racewatch itself, whose calls are interposed or are racewatch's) are searched for `syscall`
//! instructions (`0f 05`) and the instructions before each are decoded (iced-x86, from several start
//! offsets; the longest decoding that ends exactly at the `syscall` wins) for the number in `eax`:
//!
//! - `seccomp` (317), unless `edi` is known to be an operation that installs nothing
//!   (`SECCOMP_GET_ACTION_AVAIL`, `SECCOMP_GET_NOTIF_SIZES`);
//! - `prctl` (157) with `edi` = `PR_SET_SECCOMP` (22), or `edi` not known;
//! - a number `eax` copies from another register (a generic system-call wrapper's parameter): only
//!   when the module's code also loads the constant 317 into a register somewhere (`mov r32, 317` /
//!   `mov r/m, 317`), the way a caller passes it to such a wrapper. A wrapper alone is common (rustix,
//!   Go's runtime) and says nothing about seccomp. A number loaded from the frame (`[rbp - n]`, as
//!   unoptimised code keeps locals and parameters) is what was stored there: a constant, or a
//!   register (a parameter spilled by an unoptimised wrapper: as a copied one). A number loaded
//!   from other memory, or set beyond the 96 bytes decoded, is not followed (constant tables in
//!   code segments decode as such runs: a `0f 05` in libcrypto's did).
//! - `rt_sigaction` (13) with `edi` = `SIGTRAP` and `esi` not known to be null: a `SIGTRAP` handler
//!   installed without libc (a JIT's or in-process debugger's, through linux_syscall_support) would
//!   replace racewatch's in the kernel, and racewatch's sampling signals would reach it.
//!
//! Such a module makes racewatch step aside for the process, with one line naming the module and the
//! instruction's offset: the detector never starts, or is switched off right after the `dlopen` that
//! loaded it (before the program can call into it; its constructors have run by then).

use crate::sys::code::{self, CodeModule};
use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

const SYS_PRCTL: u64 = 157;
const SYS_SECCOMP: u64 = 317;
const SYS_RT_SIGACTION: u64 = 13;
const SIGTRAP: u64 = 5;
const PR_SET_SECCOMP: u64 = 22;
const SECCOMP_GET_ACTION_AVAIL: u64 = 2;
const SECCOMP_GET_NOTIF_SIZES: u64 = 3;
/// How far back from a `syscall` decoding starts (bytes).
/// (96: an unoptimised wrapper spills its six parameters to its frame and loads them back.)
const LOOK_BACK: usize = 96;

/// A `syscall` instruction that may install a seccomp filter, or a `SIGTRAP` handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The module's path (the executable's for the main program).
    pub module: String,
    /// The instruction's offset from the module's load bias (its address in the module's file).
    pub offset: u64,
    pub installs: Installs,
}

/// What a `syscall` instruction found may install behind the interposers' back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Installs {
    /// A seccomp filter (or strict mode).
    Filter,
    /// A `SIGTRAP` handler (`rt_sigaction(SIGTRAP, act, …)` with a non-null `act`): racewatch's
    /// sampling signals would reach it (a crash reporter or JIT built on linux_syscall_support).
    TrapHandler,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, why) = match self.installs {
            Installs::Filter => ("seccomp filters", ""),
            Installs::TrapHandler => ("a SIGTRAP handler", " (racewatch's sampling signals would reach it)"),
        };
        write!(f, "{}+{:#x} installs {what} with its own system call instruction{why}", self.module, self.offset)
    }
}

/// What a register holds at the `syscall`, as far as the instructions before it say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    Known(u64),
    /// Copied from another register (a wrapper's parameter).
    Copied,
    Unknown,
}

/// The modules scanned so far (load bias, path): a `dlopen` scans only what is new.
#[derive(Default)]
struct Scanned {
    modules: Vec<(u64, String)>,
    /// The loader's counts of loads and unloads when the last scan began ([`code::load_generation`]):
    /// while they stay the same there is nothing new, and the reporter's tick allocates nothing
    /// (without them, every call scans).
    generation: Option<(u64, u64)>,
}
static SCANNED: spin::Mutex<Scanned> = spin::Mutex::new(Scanned { modules: Vec::new(), generation: None });

/// In a forked child: the parent's reporter may have been scanning (holding the lock) when another
/// thread forked, and the child's first thread would spin on that lock forever. The child scans
/// everything again when its detector starts.
pub fn forget_after_fork() {
    crate::sys::fork::reset_lock_in_child(&SCANNED);
}

/// Scans every loaded module not scanned before; the first finding, if any.
pub fn scan_new_modules() -> Option<Finding> {
    let own = scan_new_modules as *const () as u64;
    let mut scanned = SCANNED.lock();
    let generation = code::load_generation();
    if generation.is_some() && scanned.generation == generation {
        return None;
    }
    scanned.generation = generation;
    let mut found = None;
    code::for_each(&mut |index, module| {
        let key = (module.bias, module.name.clone());
        if scanned.modules.contains(&key) {
            return;
        }
        scanned.modules.push(key);
        if found.is_none() && !skipped(index, module, own) {
            found = scan_module(module).map(|(offset, installs)| Finding {
                module: display_name(index, module),
                offset,
                installs,
            });
        }
    });
    found
}

/// libc and the loader (their system calls are the interposed functions' own), the vDSO and racewatch.
fn skipped(index: usize, module: &CodeModule<'_>, own: u64) -> bool {
    let file = module.name.rsplit('/').next().unwrap_or("");
    let system = file.starts_with("libc.so") || file.starts_with("ld-linux") || file.starts_with("linux-vdso");
    let vdso = index > 0 && module.name.is_empty();
    let ours = module.segments.iter().any(|&(start, bytes)| (start..start + bytes.len() as u64).contains(&own));
    system || vdso || ours
}

fn display_name(index: usize, module: &CodeModule<'_>) -> String {
    if index == 0 && module.name.is_empty() {
        return std::fs::read_link("/proc/self/exe").map_or_else(|_| "<main>".into(), |p| p.display().to_string());
    }
    module.name.clone()
}

/// The offset (from the load bias) of the first `syscall` in `module` that may install a filter or a
/// `SIGTRAP` handler, and which.
fn scan_module(module: &CodeModule<'_>) -> Option<(u64, Installs)> {
    let evidence = module.segments.iter().any(|&(_, bytes)| loads_317(bytes));
    module.segments.iter().find_map(|&(start, bytes)| {
        scan_code(bytes, start, evidence).map(|(addr, installs)| (addr.wrapping_sub(module.bias), installs))
    })
}

/// The address of the first `syscall` in `bytes` (mapped at `start`) that may install a filter, or that
/// installs a `SIGTRAP` handler (numbers and signal known: a generic wrapper's cannot be told from the
/// many that install other signals' handlers), and which. `evidence`: the module loads 317 into a
/// register somewhere (see the module docs).
pub fn scan_code(bytes: &[u8], start: u64, evidence: bool) -> Option<(u64, Installs)> {
    let mut at = 0;
    while let Some(found) = memchr::memmem::find(&bytes[at..], &[0x0f, 0x05]) {
        let site = at + found;
        at = site + 1;
        let Some([nr, arg0, arg1]) = registers_at(bytes, start, site) else { continue };
        let installs = match nr {
            Value::Known(SYS_SECCOMP) => {
                (!matches!(arg0, Value::Known(SECCOMP_GET_ACTION_AVAIL | SECCOMP_GET_NOTIF_SIZES)))
                    .then_some(Installs::Filter)
            }
            Value::Known(SYS_PRCTL) => {
                (!matches!(arg0, Value::Known(option) if option != PR_SET_SECCOMP)).then_some(Installs::Filter)
            }
            Value::Known(SYS_RT_SIGACTION) => {
                (arg0 == Value::Known(SIGTRAP) && arg1 != Value::Known(0)).then_some(Installs::TrapHandler)
            }
            Value::Known(_) | Value::Unknown => None,
            Value::Copied => evidence.then_some(Installs::Filter),
        };
        if let Some(installs) = installs {
            return Some((start + site as u64, installs));
        }
    }
    None
}

/// `eax`, `edi` and `esi` at the `syscall` at `bytes[site]`. The longest run of valid instructions that
/// reaches the site decides (decodings from different offsets fall into step after a few
/// instructions): one that ends exactly there is the code before the `syscall`; one that steps over
/// it says the two bytes lie inside another instruction (`None`, as for data).
fn registers_at(bytes: &[u8], start: u64, site: usize) -> Option<[Value; 3]> {
    let end = (site + 16).min(bytes.len());
    let mut run: Vec<Instruction> = Vec::with_capacity(16);
    let mut instr = Instruction::default();
    for back in (1..=LOOK_BACK.min(site)).rev() {
        let from = site - back;
        let mut decoder = Decoder::with_ip(64, &bytes[from..end], start + from as u64, DecoderOptions::NONE);
        run.clear();
        let mut valid = true;
        while decoder.position() < back {
            decoder.decode_out(&mut instr);
            if instr.is_invalid() {
                valid = false;
                break;
            }
            run.push(instr);
        }
        if !valid {
            continue;
        }
        if decoder.position() != back {
            return None; // Stepped over the site.
        }
        decoder.decode_out(&mut instr);
        if instr.code() != Code::Syscall {
            return None;
        }
        return Some([Register::RAX, Register::RDI, Register::RSI].map(|reg| value_of(&run, reg)));
    }
    None
}

/// The value `reg` (any width) holds after the instructions of `run`.
fn value_of(run: &[Instruction], reg: Register) -> Value {
    for (i, instr) in run.iter().enumerate().rev() {
        if matches!(instr.mnemonic(), Mnemonic::Call | Mnemonic::Syscall) {
            return Value::Unknown; // The callee's result, or the kernel's.
        }
        if matches!(instr.mnemonic(), Mnemonic::Jmp | Mnemonic::Ret) {
            return Value::Unknown; // What comes before is another path.
        }
        if instr.op_count() == 0 || instr.op0_kind() != OpKind::Register || instr.op0_register().full_register() != reg
        {
            continue;
        }
        return match (instr.mnemonic(), instr.op_count() > 1, instr.op1_kind()) {
            (Mnemonic::Mov, true, OpKind::Immediate32 | OpKind::Immediate64 | OpKind::Immediate32to64) => {
                Value::Known(instr.immediate(1))
            }
            (Mnemonic::Xor | Mnemonic::Sub, true, OpKind::Register) if instr.op1_register() == instr.op0_register() => {
                Value::Known(0)
            }
            (Mnemonic::Mov, true, OpKind::Register) => Value::Copied,
            (Mnemonic::Mov, true, OpKind::Memory) => match frame_slot(instr) {
                Some(slot) => slot_value(&run[..i], slot),
                None => Value::Unknown,
            },
            // A compare or test reads it; anything else writes it.
            (Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Push, _, _) => continue,
            _ => Value::Unknown,
        };
    }
    Value::Unknown
}

/// The frame slot (`[rbp + disp]`) an instruction's memory operand names, as unoptimised code keeps its
/// locals and parameters.
fn frame_slot(instr: &Instruction) -> Option<u64> {
    (instr.memory_base() == Register::RBP && instr.memory_index() == Register::None)
        .then(|| instr.memory_displacement64())
}

/// What frame slot `slot` holds after the instructions of `run`: a constant stored there, or a register
/// (an unoptimised wrapper's parameter, spilled to its frame and loaded back for the `syscall`).
fn slot_value(run: &[Instruction], slot: u64) -> Value {
    for instr in run.iter().rev() {
        if matches!(instr.mnemonic(), Mnemonic::Call | Mnemonic::Syscall | Mnemonic::Jmp | Mnemonic::Ret) {
            return Value::Unknown;
        }
        if instr.mnemonic() != Mnemonic::Mov || instr.op0_kind() != OpKind::Memory || frame_slot(instr) != Some(slot) {
            continue;
        }
        return match instr.op1_kind() {
            OpKind::Immediate32 | OpKind::Immediate64 | OpKind::Immediate32to64 => Value::Known(instr.immediate(1)),
            OpKind::Register => Value::Copied,
            _ => Value::Unknown,
        };
    }
    Value::Unknown
}

/// Whether `code` loads the constant 317 into a register: `mov r32, 317` (`b8+r`, with or without a
/// REX prefix) or `mov r/m32|64, 317` with a register operand (`c7 /0`, mod 11).
fn loads_317(code: &[u8]) -> bool {
    memchr::memmem::find_iter(code, &[0x3d, 0x01, 0x00, 0x00]).any(|i| {
        let mov_r32 = i >= 1 && (0xb8..=0xbf).contains(&code[i - 1]);
        let mov_rm = i >= 2 && code[i - 2] == 0xc7 && code[i - 1] & 0xf8 == 0xc0;
        mov_r32 || mov_rm
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(code: &[u8], evidence: bool) -> Option<u64> {
        scan_code(code, 0x1000, evidence).map(|(at, _)| at)
    }

    #[test]
    fn a_raw_sigtrap_handler_install_is_found_and_its_read_back_is_not() {
        // mov edi, 5; mov esi, 0x1000; mov eax, 13; syscall
        let install = [0xbf, 5, 0, 0, 0, 0xbe, 0, 0x10, 0, 0, 0xb8, 13, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(scan_code(&install, 0x1000, false), Some((0x1000 + 15, Installs::TrapHandler)));
        // mov edi, 5; xor esi, esi; mov eax, 13; syscall
        let read_back = [0xbf, 5, 0, 0, 0, 0x31, 0xf6, 0xb8, 13, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(scan(&read_back, false), None);
        // mov edi, 11 (SIGSEGV); mov esi, 0x1000; mov eax, 13; syscall
        let other = [0xbf, 11, 0, 0, 0, 0xbe, 0, 0x10, 0, 0, 0xb8, 13, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(scan(&other, false), None);
    }

    #[test]
    fn seccomp_with_a_constant_number_is_found() {
        // mov edi, 1; mov eax, 317; syscall
        let code = [0xbf, 1, 0, 0, 0, 0xb8, 0x3d, 1, 0, 0, 0x0f, 0x05, 0xc3];
        assert_eq!(scan(&code, false), Some(0x1000 + 10));
    }

    #[test]
    fn seccomp_get_action_avail_is_not_a_filter() {
        // mov edi, 2; mov eax, 317; syscall
        let code = [0xbf, 2, 0, 0, 0, 0xb8, 0x3d, 1, 0, 0, 0x0f, 0x05, 0xc3];
        assert_eq!(scan(&code, false), None);
    }

    #[test]
    fn prctl_set_seccomp_is_found_and_other_prctls_are_not() {
        // mov edi, 22; mov eax, 157; syscall
        let set = [0xbf, 22, 0, 0, 0, 0xb8, 157, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(scan(&set, false), Some(0x1000 + 10));
        // mov edi, 38 (PR_SET_NO_NEW_PRIVS); mov eax, 157; syscall
        let nnp = [0xbf, 38, 0, 0, 0, 0xb8, 157, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(scan(&nnp, false), None);
    }

    #[test]
    fn other_system_calls_are_not_found() {
        // mov eax, 39 (getpid); syscall; xor eax, eax; syscall (read)
        let code = [0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0x31, 0xc0, 0x0f, 0x05];
        assert_eq!(scan(&code, false), None);
    }

    #[test]
    fn a_generic_wrapper_counts_only_with_317_in_the_module() {
        // mov rax, rdi; mov rdi, rsi; syscall; ret
        let wrapper = [0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x0f, 0x05, 0xc3];
        assert_eq!(scan(&wrapper, false), None);
        assert_eq!(scan(&wrapper, true), Some(0x1000 + 6));
        assert!(loads_317(&[0x90, 0xbf, 0x3d, 0x01, 0x00, 0x00])); // mov edi, 317
        assert!(loads_317(&[0x48, 0xc7, 0xc0, 0x3d, 0x01, 0x00, 0x00])); // mov rax, 317
        assert!(!loads_317(&[0x3d, 0x3d, 0x01, 0x00, 0x00])); // cmp eax, 317
    }

    #[test]
    fn an_unoptimised_wrapper_loads_its_number_from_its_frame() {
        // push rbp; mov rbp, rsp; mov [rbp-8], rdi; mov [rbp-16], rsi; mov rax, [rbp-8];
        // mov rdi, [rbp-16]; syscall (clang -O0 of a `long raw(long nr, long a)` with inline assembly)
        let wrapper = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0x7d, 0xf8, 0x48, 0x89, 0x75, 0xf0, 0x48, 0x8b, 0x45, 0xf8, 0x48, 0x8b,
            0x7d, 0xf0, 0x0f, 0x05,
        ];
        assert_eq!(scan(&wrapper, false), None);
        assert_eq!(scan(&wrapper, true), Some(0x1000 + 20));
        // push rbp; mov rbp, rsp; mov qword [rbp-8], 317; mov rax, [rbp-8]; syscall: a local number
        let local =
            [0x55, 0x48, 0x89, 0xe5, 0x48, 0xc7, 0x45, 0xf8, 0x3d, 0x01, 0, 0, 0x48, 0x8b, 0x45, 0xf8, 0x0f, 0x05];
        assert_eq!(scan(&local, false), Some(0x1000 + 16));
        // The same with getpid (39) stored there: nothing.
        let getpid = [0x55, 0x48, 0x89, 0xe5, 0x48, 0xc7, 0x45, 0xf8, 39, 0, 0, 0, 0x48, 0x8b, 0x45, 0xf8, 0x0f, 0x05];
        assert_eq!(scan(&getpid, true), None);
    }

    #[test]
    fn bytes_inside_another_instruction_are_not_a_syscall() {
        // mov eax, 0x3d050f00 (0f 05 inside the immediate); ret
        let code = [0xb8, 0x00, 0x0f, 0x05, 0x3d, 0xc3];
        assert_eq!(scan(&code, true), None);
    }

    /// The scan's cost on a large binary's code: `RACEWATCH_SCAN_FILE=target/release/racewatch cargo test
    /// --release -p racewatch-runtime --lib scan_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn scan_cost() {
        let path = std::env::var("RACEWATCH_SCAN_FILE").unwrap_or_else(|_| "/proc/self/exe".into());
        let file = std::fs::read(&path).unwrap();
        let elf = goblin::elf::Elf::parse(&file).unwrap();
        let mut code = Vec::new();
        for ph in elf.program_headers.iter().filter(|ph| ph.p_type == 1 && ph.p_flags & 1 != 0) {
            code.push((ph.p_vaddr, &file[ph.p_offset as usize..(ph.p_offset + ph.p_filesz) as usize]));
        }
        let bytes: usize = code.iter().map(|(_, c)| c.len()).sum();
        let pairs: usize = code.iter().map(|(_, c)| memchr::memmem::find_iter(c, &[0x0f, 0x05]).count()).sum();
        let start = std::time::Instant::now();
        let evidence = code.iter().any(|(_, c)| loads_317(c));
        let found: Vec<_> = code.iter().filter_map(|&(at, c)| scan_code(c, at, evidence)).map(|(at, _)| at).collect();
        let elapsed = start.elapsed();
        println!(
            "{path}: {bytes} bytes of code, {pairs} `0f 05` pairs, loads 317: {evidence}, found {found:x?}, {:.2} ms",
            elapsed.as_secs_f64() * 1e3
        );
    }
}
