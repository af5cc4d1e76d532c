//! Offline symbolization for `racewatch triage`. A frame of a production report (`symbolize=0`) is
//! its module's GNU build-id and the PC's offset in that module; this module finds that build's
//! debug info the way gdb, elfutils and `debuginfod-find` do, and names the frame with
//! [`ModuleDebug`], the same per-file symbolizer the runtime uses in the process.
//!
//! Where, in order. The first file with DWARF wins; a file with only a symbol table (a stripped
//! executable keeps `.dynsym`, a debuginfod `executable` may keep `.symtab`) is kept as a fallback
//! while the search goes on, and used (function names, no lines) when nothing better is found:
//!
//! 1. the module path the report names, when the file there has the build-id; when it has no DWARF,
//!    its `.gnu_debuglink`, followed the gdb way: the file's directory, its `.debug/` subdirectory,
//!    and `<debug dir>/<the file's directory>/` for each `--debug-dir` and `/usr/lib/debug`;
//! 2. each `--debug-dir DIR`: `DIR/.build-id/xx/rest.debug`, `DIR/xx/rest.debug`, and any ELF file
//!    directly in `DIR` (scanned once, indexed by build-id);
//! 3. `/usr/lib/debug/.build-id/xx/rest.debug`;
//! 4. debuginfod: the cache (`$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/racewatch/debuginfod`,
//!    else `~/.cache/racewatch/debuginfod`; the layout is debuginfod-client's, `<build-id>/debuginfo`),
//!    then each server of `DEBUGINFOD_URLS`: `/buildid/<id>/debuginfo`, else `/executable` for its
//!    symbols. A server that cannot be reached is not asked again in the run (one timeout,
//!    `DEBUGINFOD_TIMEOUT` seconds, default 10, not one per frame).
//!
//! Everything is cached for the run: per build-id the file found (or that there is none), per
//! (build-id, offset, return address) the frames. Notes for the user (what was not found and where
//! it was looked for, a server that is down) are each said once, through
//! [`OfflineSymbolizer::take_messages`]. A corrupt or truncated file is a note, never a panic.
//!
//! This file uses nothing else of the `racewatch` crate (only `racewatch_instrument`, `ureq` and
//! `flate2`): `tests/triage_debuginfod.rs` compiles it on its own.

use racewatch_instrument::dwarf::{debug_altlink, ModuleDebug, Origin};
use racewatch_instrument::elf::Module;
use racewatch_instrument::frames::Frame;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where distributions install separate debug files.
const SYSTEM_DEBUG_DIR: &str = "/usr/lib/debug";
/// Seconds to wait for a debuginfod server to connect or send the next bytes, unless `DEBUGINFOD_TIMEOUT`
/// says otherwise.
const DEFAULT_TIMEOUT_SECS: u64 = 10;

/// Symbolizes report frames by build-id and offset, finding debug info locally and on debuginfod
/// servers. Use it on one thread; it caches everything it finds for its lifetime.
pub struct OfflineSymbolizer {
    debug_dirs: Vec<PathBuf>,
    system_debug_dir: PathBuf,
    /// ELF files directly in the debug directories, by build-id; read on first need.
    dir_index: Option<HashMap<String, Vec<PathBuf>>>,
    debuginfod: Debuginfod,
    /// Per build-id: the file that names its addresses, or that none was found.
    modules: HashMap<String, Entry>,
    /// Per (build-id, offset, return address): the frames (their `module` left empty).
    results: HashMap<(String, u64, bool), Option<Vec<Frame>>>,
    messages: Vec<String>,
    said: HashSet<String>,
}

/// What is known of one build-id.
enum Entry {
    Found(Box<ModuleDebug>),
    /// Nothing found. The module paths already tried: a later report may name the module at
    /// another path, which is then tried (only it: everything else was already searched).
    Missing(HashSet<String>),
}

/// debuginfod servers and their cache.
struct Debuginfod {
    urls: Vec<String>,
    cache: PathBuf,
    timeout: Duration,
    agent: Option<ureq::Agent>,
    /// Servers that could not be reached, and why: not asked again in this run.
    down: Vec<(String, String)>,
    /// How many of `down` a note has already named.
    down_said: usize,
}

/// The environment's debuginfod settings.
#[derive(Debug, PartialEq, Eq)]
struct Config {
    urls: Vec<String>,
    cache: PathBuf,
    timeout: Duration,
}

impl Config {
    /// Reads `DEBUGINFOD_URLS`, `DEBUGINFOD_CACHE_PATH`, `XDG_CACHE_HOME`, `HOME` and
    /// `DEBUGINFOD_TIMEOUT` through `var` (empty values count as unset).
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Config {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let urls = var("DEBUGINFOD_URLS")
            .map(|v| v.split_whitespace().map(|u| u.trim_end_matches('/').to_string()).collect())
            .unwrap_or_default();
        let cache = if let Some(dir) = var("DEBUGINFOD_CACHE_PATH") {
            PathBuf::from(dir)
        } else if let Some(xdg) = var("XDG_CACHE_HOME").filter(|d| d.starts_with('/')) {
            Path::new(&xdg).join("racewatch/debuginfod")
        } else if let Some(home) = var("HOME") {
            Path::new(&home).join(".cache/racewatch/debuginfod")
        } else {
            std::env::temp_dir().join("racewatch-debuginfod")
        };
        let timeout = var("DEBUGINFOD_TIMEOUT")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .unwrap_or(DEFAULT_TIMEOUT_SECS);
        Config { urls, cache, timeout: Duration::from_secs(timeout) }
    }
}

impl OfflineSymbolizer {
    /// A symbolizer that also looks in `debug_dirs` (`--debug-dir`), and asks the debuginfod servers
    /// of `DEBUGINFOD_URLS` (space-separated), caching their files in `$DEBUGINFOD_CACHE_PATH` (or
    /// `$XDG_CACHE_HOME/racewatch/debuginfod`, or `~/.cache/racewatch/debuginfod`).
    pub fn new(debug_dirs: Vec<PathBuf>) -> Self {
        let config = Config::from_vars(|name| std::env::var(name).ok());
        Self::with_debuginfod(debug_dirs, config.urls, config.cache, config.timeout)
    }

    /// As [`OfflineSymbolizer::new`], with the debuginfod servers, cache directory and timeout given
    /// instead of read from the environment.
    pub fn with_debuginfod(debug_dirs: Vec<PathBuf>, urls: Vec<String>, cache: PathBuf, timeout: Duration) -> Self {
        OfflineSymbolizer {
            debug_dirs,
            system_debug_dir: PathBuf::from(SYSTEM_DEBUG_DIR),
            dir_index: None,
            debuginfod: Debuginfod { urls, cache, timeout, agent: None, down: Vec::new(), down_said: 0 },
            modules: HashMap::new(),
            results: HashMap::new(),
            messages: Vec::new(),
            said: HashSet::new(),
        }
    }

    /// Frames for one PC, innermost first (inlined frames, then the physical one); `None` when no
    /// debug info or symbols are found anywhere for this build-id. `offset` is the PC in the module's
    /// own address space; a return address is looked up at `offset - 1` (the call). The frames carry
    /// `module_path` as their module.
    pub fn symbolize(
        &mut self,
        build_id: &str,
        module_path: Option<&str>,
        offset: u64,
        is_return_address: bool,
    ) -> Option<Vec<Frame>> {
        let build_id = build_id.trim().to_ascii_lowercase();
        if !is_build_id(&build_id) {
            let name = module_name(module_path);
            self.say(if build_id.is_empty() {
                format!("{name} has no build-id: its frames are left unsymbolized (offline symbolization finds files by build-id)")
            } else {
                format!("not a build-id: {build_id:?} ({name}): its frames are left unsymbolized")
            });
            return None;
        }
        let key = (build_id, offset, is_return_address);
        if let Some(frames) = self.results.get(&key) {
            return frames.clone().map(|f| with_module(f, module_path));
        }
        if !self.locate(&key.0, module_path) {
            // Not remembered per offset: another report may name a path where the module is.
            return None;
        }
        let Some(Entry::Found(debug)) = self.modules.get(&key.0) else { return None };
        let origin = Origin { module: None, build_id: Some(&key.0), cwd: None };
        let frames = catch_unwind(AssertUnwindSafe(|| debug.symbolize(offset, is_return_address, origin)));
        let frames = match frames {
            Ok(frames) => Some(frames),
            Err(_) => {
                self.say(format!(
                    "build-id {} ({}): reading its debug info failed at offset {offset:#x}; that frame is left unsymbolized",
                    key.0,
                    module_name(module_path)
                ));
                None
            }
        };
        self.results.insert(key, frames.clone());
        frames.map(|f| with_module(f, module_path))
    }

    /// The global or static variable of the module's symbol table that holds `offset` (an address in
    /// the module's own address space): its name, size and start offset. `None` when no file of the
    /// build-id is found, or no variable holds the address.
    pub fn data_symbol(
        &mut self,
        build_id: &str,
        module_path: Option<&str>,
        offset: u64,
    ) -> Option<(String, u64, u64)> {
        let build_id = build_id.trim().to_ascii_lowercase();
        if !is_build_id(&build_id) || !self.locate(&build_id, module_path) {
            return None;
        }
        let Some(Entry::Found(debug)) = self.modules.get(&build_id) else { return None };
        let found = catch_unwind(AssertUnwindSafe(|| {
            racewatch_instrument::symbols::find_function(debug.objects(), offset)
                .map(|object| (object.name.clone(), object.size, object.address))
        }));
        found.ok().flatten()
    }

    /// One-line notes gathered since the last call, each said once in the symbolizer's lifetime.
    pub fn take_messages(&mut self) -> Vec<String> {
        std::mem::take(&mut self.messages)
    }

    fn say(&mut self, message: String) {
        if self.said.insert(message.clone()) {
            self.messages.push(message);
        }
    }

    /// Makes sure `self.modules` knows `build_id`; whether a file that names its addresses was found.
    fn locate(&mut self, build_id: &str, module_path: Option<&str>) -> bool {
        let retry_path = match self.modules.get_mut(build_id) {
            Some(Entry::Found(_)) => return true,
            Some(Entry::Missing(tried)) => match module_path {
                Some(path) if tried.insert(path.to_string()) => Some(path),
                _ => return false,
            },
            None => None,
        };
        let mut search = Search::new(build_id);
        if let Some(path) = retry_path {
            // Everything but the module path was searched before.
            self.at_module_path(&mut search, path);
        } else {
            self.search(&mut search, module_path);
        }
        let name = module_name(module_path);
        // Where it looked goes into a note unless DWARF was found.
        let named_in_note = search.dwarf.is_none();
        let chosen = match (search.dwarf.take(), search.symbols_only.take()) {
            (Some(file), _) => Some(file),
            (None, Some(file)) => {
                self.say(format!(
                    "only symbols for build-id {build_id} ({name}), from {}: frames have function names but no \
                     file:line; no debug info in {}",
                    file.display(),
                    search.looked.join(", ")
                ));
                Some(file)
            }
            (None, None) => {
                // A retry looked at one path only: its note says so.
                let what = if retry_path.is_some() { "no debug info at the other path" } else { "no debug info" };
                self.say(format!(
                    "{what} for build-id {build_id} ({name}): looked in {}; its frames stay build-id+offset",
                    search.looked.join(", ")
                ));
                None
            }
        };
        let sup = chosen.as_deref().and_then(|file| self.supplementary(file, build_id, name));
        let opened = chosen.and_then(|file| match open_debug(&file, sup.as_deref()) {
            Ok(debug) => Some(debug),
            Err(why) => {
                self.say(format!("build-id {build_id} ({name}): {why}; its frames stay build-id+offset"));
                None
            }
        });
        // A server found down is named once: in the note above, else in one of its own.
        if named_in_note {
            self.debuginfod.down_said = self.debuginfod.down.len();
        } else if let Some(note) = self.debuginfod.unsaid_down() {
            self.say(note);
        }
        match opened {
            Some(debug) => {
                self.modules.insert(build_id.to_string(), Entry::Found(Box::new(debug)));
                true
            }
            None => {
                let tried = module_path.map(str::to_string).into_iter().collect();
                self.modules.entry(build_id.to_string()).or_insert(Entry::Missing(tried));
                false
            }
        }
    }

    /// The supplementary file the debug file `file` refers to (`.gnu_debugaltlink`, written by dwz: the
    /// DWARF that several packages' debug files share), when it names one: at the path it gives
    /// (absolute, or next to `file`), else found by its build-id like any debug file (debug dirs,
    /// /usr/lib/debug/.build-id, debuginfod). Without it, names and files kept there are missing: said once.
    fn supplementary(&mut self, file: &Path, build_id: &str, name: &str) -> Option<PathBuf> {
        let module = catch_unwind(|| Module::from_bytes(file, std::fs::read(file).ok()?).ok()).ok().flatten()?;
        let (written, sup_id) = module.section_data(".gnu_debugaltlink").and_then(|(_, data)| debug_altlink(data))?;
        if !is_build_id(&sup_id) {
            return None;
        }
        let mut search = Search::new(&sup_id);
        let next_to = file.parent().map(|dir| dir.join(&written));
        for candidate in [Some(PathBuf::from(&written)), next_to].into_iter().flatten() {
            if candidate.is_file() && search.read(&candidate, Expect::BuildId).is_some() {
                return Some(candidate);
            }
        }
        self.search(&mut search, None);
        let found = search.dwarf.take().or(search.matched.take());
        if found.is_none() {
            self.say(format!(
                "build-id {build_id} ({name}): its debug info refers to a supplementary file (dwz) {written} with \
                 build-id {sup_id}, not found: looked in {}; names kept there are missing",
                search.looked.join(", ")
            ));
        }
        found
    }

    /// Every place in order, until a file with DWARF is found.
    fn search(&mut self, search: &mut Search, module_path: Option<&str>) {
        if let Some(path) = module_path {
            if self.at_module_path(search, path) {
                return;
            }
        }
        let build_id = search.build_id.clone();
        let (head, rest) = build_id.split_at(2);
        for dir in self.debug_dirs.clone() {
            let by_id = [
                dir.join(".build-id").join(head).join(format!("{rest}.debug")),
                dir.join(head).join(format!("{rest}.debug")),
            ];
            if by_id.iter().any(|file| search.try_file(file, Expect::BuildId)) {
                return;
            }
            let indexed = self.dir_index().get(&build_id).cloned().unwrap_or_default();
            let here = indexed.iter().filter(|file| file.parent() == Some(dir.as_path()));
            if here.into_iter().any(|file| search.try_file(file, Expect::BuildId)) {
                return;
            }
            search.looked.push(format!("--debug-dir {}", dir.display()));
        }
        let system = self.system_debug_dir.join(".build-id").join(head).join(format!("{rest}.debug"));
        if search.try_file(&system, Expect::BuildId) {
            return;
        }
        search.looked.push(format!("{}/.build-id", self.system_debug_dir.display()));
        self.debuginfod.search(search);
    }

    /// Step 1: the file at the path the report names and its `.gnu_debuglink`. True when DWARF was found.
    fn at_module_path(&mut self, search: &mut Search, path: &str) -> bool {
        let file = Path::new(path);
        if !file.is_file() {
            search.looked.push(format!("{path} (no such file here)"));
            return false;
        }
        let (name, crc) = match search.check_module_file(file) {
            AtPath::Dwarf => return true,
            AtPath::NotThisBuild => return false,
            AtPath::NoDwarf(Some(link)) => link,
            // Already noted: `<path> (no debug info)`.
            AtPath::NoDwarf(None) => return false,
        };
        let real = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        let dir = real.parent().unwrap_or(Path::new("/"));
        let relative_dir = dir.strip_prefix("/").unwrap_or(dir);
        let mut candidates = vec![dir.join(&name), dir.join(".debug").join(&name)];
        for debug_dir in self.debug_dirs.iter().chain([&self.system_debug_dir]) {
            candidates.push(debug_dir.join(relative_dir).join(&name));
        }
        for candidate in candidates {
            if std::fs::canonicalize(&candidate).is_ok_and(|c| c == real) {
                continue;
            }
            if search.try_file(&candidate, Expect::Crc(crc)) {
                return true;
            }
        }
        search.looked.push(format!("{path}'s .gnu_debuglink {name} (not found)"));
        false
    }

    /// The ELF files directly in the debug directories, by build-id (read once).
    fn dir_index(&mut self) -> &HashMap<String, Vec<PathBuf>> {
        let dirs = &self.debug_dirs;
        self.dir_index.get_or_insert_with(|| {
            let mut index: HashMap<String, Vec<PathBuf>> = HashMap::new();
            for dir in dirs {
                let Ok(entries) = std::fs::read_dir(dir) else { continue };
                let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| is_elf(p)).collect();
                files.sort();
                for file in files {
                    if let Ok(Ok(id)) = catch_unwind(|| Module::open(&file).map(|m| m.build_id())) {
                        if !id.is_empty() {
                            index.entry(id).or_default().push(file);
                        }
                    }
                }
            }
            index
        })
    }
}

/// What a candidate file must match to stand for the build-id.
#[derive(Clone, Copy)]
enum Expect {
    /// Its build-id.
    BuildId,
    /// Its build-id, or, for a debug file without one, the CRC-32 a `.gnu_debuglink` recorded.
    Crc(u32),
}

/// What the file at a report's module path is.
enum AtPath {
    /// Unreadable, or another build (noted in [`Search::looked`]).
    NotThisBuild,
    /// This build's, with DWARF.
    Dwarf,
    /// This build's without DWARF, and its `.gnu_debuglink` (file name and CRC) if it has one.
    NoDwarf(Option<(String, u32)>),
}

/// One build-id's search: what was found and where it looked.
struct Search {
    build_id: String,
    /// The first file found with DWARF.
    dwarf: Option<PathBuf>,
    /// The first file found with only a symbol table.
    symbols_only: Option<PathBuf>,
    /// The first file of this build-id, whatever it holds (a dwz supplementary file may hold only the
    /// strings its debug files share).
    matched: Option<PathBuf>,
    /// Where it looked (and why a place did not do), for the note when nothing is found.
    looked: Vec<String>,
}

impl Search {
    fn new(build_id: &str) -> Search {
        Search { build_id: build_id.to_string(), dwarf: None, symbols_only: None, matched: None, looked: Vec::new() }
    }

    /// Reads `path`; when it is this build's, keeps it as the DWARF file (true) or as the symbols
    /// fallback. A file that does not exist is passed over in silence.
    fn try_file(&mut self, path: &Path, expect: Expect) -> bool {
        if !path.is_file() {
            return false;
        }
        let Some(module) = self.read(path, expect) else { return false };
        self.keep(path, &module)
    }

    /// Reads step 1's file: whether it is this build's and has DWARF (then kept), and its
    /// `.gnu_debuglink` when it has none.
    fn check_module_file(&mut self, path: &Path) -> AtPath {
        let Some(module) = self.read(path, Expect::BuildId) else { return AtPath::NotThisBuild };
        if self.keep(path, &module) {
            return AtPath::Dwarf;
        }
        AtPath::NoDwarf(module.section_data(".gnu_debuglink").and_then(|(_, data)| debuglink(data)))
    }

    /// Reads and checks a candidate; a note in `looked` when it is unreadable or another build's.
    fn read(&mut self, path: &Path, expect: Expect) -> Option<Module> {
        let read = catch_unwind(|| -> Result<(Module, u32), String> {
            let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
            let crc = match expect {
                Expect::Crc(_) => {
                    let mut crc = flate2::Crc::new();
                    crc.update(&bytes);
                    crc.sum()
                }
                Expect::BuildId => 0,
            };
            let module = Module::from_bytes(path, bytes).map_err(|e| e.to_string())?;
            Ok((module, crc))
        });
        let (module, crc) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(why)) => {
                // An ELF error names the file itself.
                let prefix = format!("{}: ", path.display());
                let why = why.strip_prefix(&prefix).unwrap_or(&why);
                self.looked.push(format!("{} (unreadable: {why})", path.display()));
                return None;
            }
            Err(_) => {
                self.looked.push(format!("{} (unreadable: corrupt ELF)", path.display()));
                return None;
            }
        };
        let id = module.build_id();
        let matches = match expect {
            _ if id == self.build_id => true,
            Expect::Crc(wanted) => id.is_empty() && crc == wanted,
            Expect::BuildId => false,
        };
        if !matches {
            let other = if id.is_empty() { "no build-id".to_string() } else { format!("build-id {id}") };
            self.looked.push(format!("{} ({other}: another build)", path.display()));
            return None;
        }
        self.matched.get_or_insert_with(|| path.to_path_buf());
        Some(module)
    }

    /// Keeps a file of this build: as the DWARF file (true) or, with a symbol table only, as the
    /// fallback.
    fn keep(&mut self, path: &Path, module: &Module) -> bool {
        if has_dwarf(module) {
            self.dwarf = Some(path.to_path_buf());
            return true;
        }
        if self.symbols_only.is_none() && !module.functions.is_empty() {
            self.symbols_only = Some(path.to_path_buf());
        }
        self.looked.push(format!("{} (no debug info)", path.display()));
        false
    }
}

impl Debuginfod {
    /// Step 4: the cache, then the servers; `debuginfo` first, `executable` (for symbols) when no
    /// symbols were found so far.
    fn search(&mut self, search: &mut Search) {
        if self.try_kind(search, "debuginfo") || search.symbols_only.is_some() {
            return;
        }
        self.try_kind(search, "executable");
    }

    /// One kind of file from the cache or a server; true when it has DWARF.
    fn try_kind(&mut self, search: &mut Search, kind: &str) -> bool {
        let cached = self.cache.join(&search.build_id).join(kind);
        if cached.is_file() {
            let before = (search.dwarf.is_some(), search.symbols_only.is_some());
            if search.try_file(&cached, Expect::BuildId) {
                return true;
            }
            if (search.dwarf.is_some(), search.symbols_only.is_some()) != before {
                return false;
            }
            // Neither this build's nor usable: a bad download; fetch it again.
            let _ = std::fs::remove_file(&cached);
        }
        if self.urls.is_empty() {
            if kind == "debuginfo" {
                search.looked.push("debuginfod (DEBUGINFOD_URLS is not set)".to_string());
            }
            return false;
        }
        for url in self.urls.clone() {
            if self.down.iter().any(|(u, _)| *u == url) {
                if kind == "debuginfo" {
                    search.looked.push(format!("debuginfod {url} (skipped: unreachable earlier)"));
                }
                continue;
            }
            match self.download(&url, &search.build_id, kind, &cached) {
                Ok(()) => {
                    if search.try_file(&cached, Expect::BuildId) {
                        return true;
                    }
                    if search.symbols_only.as_ref() == Some(&cached) {
                        return false;
                    }
                    let _ = std::fs::remove_file(&cached);
                }
                Err(Failure::Answer(why)) => search.looked.push(format!("debuginfod {url} ({kind}: {why})")),
                Err(Failure::Down(why)) => {
                    search.looked.push(format!("debuginfod {url} (unreachable: {why}; not asked again in this run)"));
                    self.down.push((url, why));
                }
            }
        }
        false
    }

    /// GETs `<url>/buildid/<id>/<kind>` into `to` (through a temporary file beside it).
    fn download(&mut self, url: &str, build_id: &str, kind: &str, to: &Path) -> Result<(), Failure> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Failure::Down("not an http:// or https:// URL".to_string()));
        }
        let timeout = self.timeout;
        let agent = self.agent.get_or_insert_with(|| {
            ureq::AgentBuilder::new()
                .timeout_connect(timeout)
                .timeout_read(timeout)
                .user_agent(concat!("racewatch/", env!("CARGO_PKG_VERSION")))
                .build()
        });
        let response = match agent.get(&format!("{url}/buildid/{build_id}/{kind}")).call() {
            Ok(response) => response,
            Err(ureq::Error::Status(404, _)) => return Err(Failure::Answer("not found".to_string())),
            Err(ureq::Error::Status(code, response)) => {
                return Err(Failure::Answer(format!("HTTP {code} {}", response.status_text())))
            }
            Err(ureq::Error::Transport(t)) => return Err(Failure::Down(transport_reason(&t))),
        };
        let dir = to.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| Failure::Answer(format!("cannot cache in {}: {e}", dir.display())))?;
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = dir.join(format!(".{kind}.{}.{serial}.tmp", std::process::id()));
        let written = (|| -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temp)?;
            std::io::copy(&mut response.into_reader(), &mut file)?;
            file.flush()?;
            std::fs::rename(&temp, to)
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock {
                Failure::Down(format!("download timed out: {e}"))
            } else {
                Failure::Answer(format!("download failed: {e}"))
            }
        })
    }

    /// A note for the servers found down that no note has named yet.
    fn unsaid_down(&mut self) -> Option<String> {
        if self.down_said >= self.down.len() {
            return None;
        }
        let names: Vec<String> = self.down[self.down_said..].iter().map(|(u, why)| format!("{u} ({why})")).collect();
        self.down_said = self.down.len();
        Some(format!("debuginfod server unreachable, not asked again in this run: {}", names.join(", ")))
    }
}

/// Why a server gave no file.
enum Failure {
    /// It answered: not found, an HTTP error, a broken download.
    Answer(String),
    /// It could not be reached (or stopped answering): not asked again in this run.
    Down(String),
}

/// A transport error in a few words: `Connection Failed: Connection refused (os error 111)`.
fn transport_reason(t: &ureq::Transport) -> String {
    let kind = t.kind().to_string();
    let detail = std::error::Error::source(t).map(|s| s.to_string()).or_else(|| t.message().map(str::to_string));
    match detail {
        Some(detail) if detail.starts_with(&kind) => detail,
        Some(detail) => format!("{kind}: {detail}"),
        None => kind,
    }
}

/// Opens a file for symbolizing (with its dwz supplementary file, when it has one); an error when it
/// names nothing after all.
fn open_debug(path: &Path, sup: Option<&Path>) -> Result<ModuleDebug, String> {
    let debug = catch_unwind(|| {
        let debug = ModuleDebug::open_with_sup(path, sup, |p| std::fs::read(p));
        let can_name = debug.can_name();
        (debug, can_name)
    });
    match debug {
        Ok((debug, true)) => Ok(debug),
        Ok((_, false)) => Err(format!("{}: its debug info cannot be read", path.display())),
        Err(_) => Err(format!("{}: corrupt debug info", path.display())),
    }
}

/// Whether a module has DWARF that names functions and lines.
fn has_dwarf(module: &Module) -> bool {
    [".debug_info", ".zdebug_info"].iter().any(|name| module.section_data(name).is_some_and(|(_, d)| !d.is_empty()))
}

/// The file name and CRC-32 of a `.gnu_debuglink` section: the name, NUL, padding to 4 bytes, the CRC.
fn debuglink(data: &[u8]) -> Option<(String, u32)> {
    let end = data.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&data[..end]).ok().filter(|n| !n.is_empty() && !n.contains('/'))?;
    let at = (end + 1).div_ceil(4) * 4;
    let crc = data.get(at..at + 4)?;
    Some((name.to_string(), u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]])))
}

/// Whether the file starts with the ELF magic.
fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok()
        && magic == *b"\x7fELF"
}

/// Lower-case hex of a plausible length (what goes into paths and URLs is never anything else).
fn is_build_id(id: &str) -> bool {
    (4..=128).contains(&id.len()) && id.len() % 2 == 0 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The module's file name for notes (`racy_counter`), or `unknown module`.
fn module_name(module_path: Option<&str>) -> &str {
    module_path.map(|p| p.rsplit('/').next().unwrap_or(p)).filter(|n| !n.is_empty()).unwrap_or("unknown module")
}

/// The frames with the report's module path.
fn with_module(mut frames: Vec<Frame>, module_path: Option<&str>) -> Vec<Frame> {
    for frame in &mut frames {
        frame.module = module_path.map(str::to_string);
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_reads_the_debuginfod_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let config = Config::from_vars(vars(&[
            ("DEBUGINFOD_URLS", " https://debuginfod.debian.net/  http://127.0.0.1:8002 "),
            ("DEBUGINFOD_CACHE_PATH", "/var/cache/dbg"),
            ("XDG_CACHE_HOME", "/home/u/.xdg"),
            ("DEBUGINFOD_TIMEOUT", "3"),
        ]));
        assert_eq!(
            config,
            Config {
                urls: vec!["https://debuginfod.debian.net".into(), "http://127.0.0.1:8002".into()],
                cache: "/var/cache/dbg".into(),
                timeout: Duration::from_secs(3),
            }
        );
        let config = Config::from_vars(vars(&[("XDG_CACHE_HOME", "/home/u/.xdg"), ("DEBUGINFOD_TIMEOUT", "soon")]));
        assert!(config.urls.is_empty());
        assert_eq!(config.cache, Path::new("/home/u/.xdg/racewatch/debuginfod"));
        assert_eq!(config.timeout, Duration::from_secs(DEFAULT_TIMEOUT_SECS));
        // A relative XDG_CACHE_HOME is invalid (XDG base directory spec): HOME decides.
        let config =
            Config::from_vars(vars(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/home/u"), ("DEBUGINFOD_URLS", " ")]));
        assert!(config.urls.is_empty());
        assert_eq!(config.cache, Path::new("/home/u/.cache/racewatch/debuginfod"));
    }

    #[test]
    fn debuglink_sections_give_name_and_crc() {
        let mut data = b"app.debug\0\0\0".to_vec();
        data.extend(0xdeadbeefu32.to_le_bytes());
        assert_eq!(debuglink(&data), Some(("app.debug".to_string(), 0xdeadbeef)));
        // The name fills 4 bytes exactly: a whole word of padding follows its NUL.
        let mut data = b"abc\0".to_vec();
        data.extend(7u32.to_le_bytes());
        assert_eq!(debuglink(&data), Some(("abc".to_string(), 7)));
        assert_eq!(debuglink(b"app.debug\0\0\0\x01\x02"), None, "truncated");
        assert_eq!(debuglink(b"no terminator"), None);
        assert_eq!(debuglink(b"../etc/passwd\0\0\0\0\0\0\0"), None, "a path, not a file name");
    }

    #[test]
    fn build_ids_are_hex_only() {
        assert!(is_build_id("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_build_id("../../etc"));
        assert!(!is_build_id("abc"));
        assert!(!is_build_id(""));
    }

    #[test]
    fn a_bad_build_id_is_one_note_and_no_lookup() {
        let mut symbolizer = OfflineSymbolizer::with_debuginfod(
            Vec::new(),
            vec!["http://127.0.0.1:1".into()],
            std::env::temp_dir().join("racewatch-never-written"),
            Duration::from_secs(1),
        );
        assert_eq!(symbolizer.symbolize("../x", Some("/bin/app"), 0x10, false), None);
        assert_eq!(symbolizer.symbolize("../x", Some("/bin/app"), 0x20, false), None);
        let messages = symbolizer.take_messages();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].contains("(app)"), "{messages:?}");
        assert!(symbolizer.debuginfod.down.is_empty());
    }

    #[test]
    fn a_corrupt_file_at_the_module_path_is_a_note() {
        let dir = std::env::temp_dir().join(format!("racewatch-symbolize-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("app");
        // An ELF header that points its section headers far past the end of the file.
        let mut bytes = b"\x7fELF\x02\x01\x01".to_vec();
        bytes.resize(64, 0);
        bytes[16] = 3; // ET_DYN
        bytes[18] = 62; // EM_X86_64
        bytes[40..48].copy_from_slice(&0x7fff_ffffu64.to_le_bytes());
        bytes[60] = 40;
        std::fs::write(&file, &bytes).unwrap();
        let mut symbolizer = OfflineSymbolizer::with_debuginfod(
            vec![dir.clone()],
            Vec::new(),
            dir.join("cache"),
            Duration::from_secs(1),
        );
        let id = "ab".repeat(20);
        assert_eq!(symbolizer.symbolize(&id, file.to_str(), 0x1000, false), None);
        let messages = symbolizer.take_messages();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].contains("unreadable"), "{messages:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
