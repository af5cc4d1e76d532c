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
//!    else `~/.cache/racewatch/debuginfod`, else a private directory of ours in the temporary
//!    directory; the layout is debuginfod-client's, `<build-id>/debuginfo`), then each server of
//!    `DEBUGINFOD_URLS`: `/buildid/<id>/debuginfo`, else `/executable` for its symbols. A server that
//!    cannot be reached is not asked again in the run (one timeout, `DEBUGINFOD_TIMEOUT` seconds,
//!    default 10, not one per frame).
//!
//! The cache is private (docs/SECURITY.md): a directory of the effective user's that no one else
//! may write (racewatch's own are made, and kept, mode 0700), or it is not used at all: a fresh
//! private directory stands in for the run. Without `$HOME` the place in the temporary directory,
//! `racewatch-debuginfod-<euid>`, is used only when it is ours and 0700; when another user holds the
//! name, a fresh `racewatch-debuginfod-<euid>.<random>` is made. A download goes to a new file
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600) renamed into place, and is bounded: at most
//! `DEBUGINFOD_MAXSIZE` bytes (default 256 MiB, 0: no limit; a larger `Content-Length` is refused
//! before the body is read) within `DEBUGINFOD_MAXTIME` seconds for the whole transfer (default 120),
//! redirects followed only to the same origin (scheme, host and port: never https to http).
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
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where distributions install separate debug files.
const SYSTEM_DEBUG_DIR: &str = "/usr/lib/debug";
/// Seconds to wait for a debuginfod server to connect or send the next bytes, unless `DEBUGINFOD_TIMEOUT`
/// says otherwise.
const DEFAULT_TIMEOUT_SECS: u64 = 10;
/// The largest file downloaded, unless `DEBUGINFOD_MAXSIZE` says otherwise (bytes; 0: no limit).
const DEFAULT_MAX_SIZE: u64 = 256 << 20;
/// Seconds one download may take in all, unless `DEBUGINFOD_MAXTIME` says otherwise.
const DEFAULT_MAX_TIME_SECS: u64 = 120;
/// Redirects followed for one file (same origin only).
const MAX_REDIRECTS: usize = 5;

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
    /// Build-ids of the files looked at, read from their headers alone (see [`probe_build_id`]).
    probes: Probes,
}

/// Per path: the file's identity (device, inode, size, modification time) and its build-id (`None`: it
/// has none), or why it could not be read. A file is probed once per run, whatever the number of
/// build-ids that reports name it with.
type Probes = HashMap<PathBuf, ((u64, u64, u64, i64), Result<Option<String>, String>)>;

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
    cache: CacheDir,
    /// The cache directory checked (or the private stand-in), once known.
    cache_ready: Option<PathBuf>,
    timeout: Duration,
    limits: Limits,
    agent: Option<ureq::Agent>,
    /// Notes for the user (an untrusted cache directory), said through the symbolizer.
    notes: Vec<String>,
    /// Servers that could not be reached, and why: not asked again in this run.
    down: Vec<(String, String)>,
    /// How many of `down` a note has already named.
    down_said: usize,
}

/// Where downloaded files are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CacheDir {
    /// `DEBUGINFOD_CACHE_PATH` (or the directory a caller gives): used when it is the effective user's
    /// and no one else may write it.
    Given(PathBuf),
    /// racewatch's own, `<cache home>/racewatch/debuginfod`: made mode 0700 and kept so.
    Own(PathBuf),
    /// No cache home (`$HOME` unset): `racewatch-debuginfod-<euid>` in the temporary directory when it
    /// is ours and private, else a fresh private directory beside it.
    Temp,
}

/// What one download may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes of one file (`None`: no limit).
    pub max_size: Option<u64>,
    /// The longest one file's transfer may take, redirects included.
    pub max_time: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_size: Some(DEFAULT_MAX_SIZE), max_time: Duration::from_secs(DEFAULT_MAX_TIME_SECS) }
    }
}

/// The environment's debuginfod settings.
#[derive(Debug, PartialEq, Eq)]
struct Config {
    urls: Vec<String>,
    cache: CacheDir,
    timeout: Duration,
    limits: Limits,
}

impl Config {
    /// Reads `DEBUGINFOD_URLS`, `DEBUGINFOD_CACHE_PATH`, `XDG_CACHE_HOME`, `HOME`, `DEBUGINFOD_TIMEOUT`,
    /// `DEBUGINFOD_MAXSIZE` and `DEBUGINFOD_MAXTIME` through `var` (empty values count as unset).
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Config {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let urls = var("DEBUGINFOD_URLS")
            .map(|v| v.split_whitespace().map(|u| u.trim_end_matches('/').to_string()).collect())
            .unwrap_or_default();
        let cache = if let Some(dir) = var("DEBUGINFOD_CACHE_PATH") {
            CacheDir::Given(PathBuf::from(dir))
        } else if let Some(xdg) = var("XDG_CACHE_HOME").filter(|d| d.starts_with('/')) {
            CacheDir::Own(Path::new(&xdg).join("racewatch/debuginfod"))
        } else if let Some(home) = var("HOME").filter(|d| d.starts_with('/')) {
            CacheDir::Own(Path::new(&home).join(".cache/racewatch/debuginfod"))
        } else {
            CacheDir::Temp
        };
        let number = |name: &str| var(name).and_then(|t| t.trim().parse::<u64>().ok());
        let timeout = number("DEBUGINFOD_TIMEOUT").filter(|&t| t > 0).unwrap_or(DEFAULT_TIMEOUT_SECS);
        // As elfutils' client: 0 is no limit.
        let max_size = match number("DEBUGINFOD_MAXSIZE") {
            Some(0) => None,
            Some(n) => Some(n),
            None => Some(DEFAULT_MAX_SIZE),
        };
        let max_time = match number("DEBUGINFOD_MAXTIME") {
            Some(0) => Duration::MAX,
            Some(n) => Duration::from_secs(n),
            None => Duration::from_secs(DEFAULT_MAX_TIME_SECS),
        };
        Config { urls, cache, timeout: Duration::from_secs(timeout), limits: Limits { max_size, max_time } }
    }
}

impl OfflineSymbolizer {
    /// A symbolizer that also looks in `debug_dirs` (`--debug-dir`), and asks the debuginfod servers
    /// of `DEBUGINFOD_URLS` (space-separated), caching their files in `$DEBUGINFOD_CACHE_PATH` (or
    /// `$XDG_CACHE_HOME/racewatch/debuginfod`, or `~/.cache/racewatch/debuginfod`).
    pub fn new(debug_dirs: Vec<PathBuf>) -> Self {
        let config = Config::from_vars(|name| std::env::var(name).ok());
        let mut symbolizer = Self::with_debuginfod(debug_dirs, config.urls, PathBuf::new(), config.timeout);
        symbolizer.debuginfod.cache = config.cache;
        symbolizer.with_limits(config.limits)
    }

    /// The same, with these download limits (`DEBUGINFOD_MAXSIZE`, `DEBUGINFOD_MAXTIME`).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.debuginfod.limits = limits;
        self
    }

    /// As [`OfflineSymbolizer::new`], with the debuginfod servers, cache directory and timeout given
    /// instead of read from the environment.
    pub fn with_debuginfod(debug_dirs: Vec<PathBuf>, urls: Vec<String>, cache: PathBuf, timeout: Duration) -> Self {
        OfflineSymbolizer {
            debug_dirs,
            system_debug_dir: PathBuf::from(SYSTEM_DEBUG_DIR),
            dir_index: None,
            debuginfod: Debuginfod {
                urls,
                cache: CacheDir::Given(cache),
                cache_ready: None,
                timeout,
                limits: Limits::default(),
                agent: None,
                notes: Vec::new(),
                down: Vec::new(),
                down_said: 0,
            },
            modules: HashMap::new(),
            results: HashMap::new(),
            messages: Vec::new(),
            said: HashSet::new(),
            probes: HashMap::new(),
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
        let mut search = Search::new(build_id, std::mem::take(&mut self.probes));
        if let Some(path) = retry_path {
            // Everything but the module path was searched before.
            self.at_module_path(&mut search, path);
        } else {
            self.search(&mut search, module_path);
        }
        self.probes = std::mem::take(&mut search.probes);
        for note in std::mem::take(&mut self.debuginfod.notes) {
            self.say(note);
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
        let mut search = Search::new(&sup_id, std::mem::take(&mut self.probes));
        let next_to = file.parent().map(|dir| dir.join(&written));
        for candidate in [Some(PathBuf::from(&written)), next_to].into_iter().flatten() {
            if candidate.is_file() && search.read(&candidate, Expect::BuildId).is_some() {
                return Some(candidate);
            }
        }
        self.search(&mut search, None);
        self.probes = std::mem::take(&mut search.probes);
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
    /// The symbolizer's probes, lent for the search.
    probes: Probes,
}

impl Search {
    fn new(build_id: &str, probes: Probes) -> Search {
        Search {
            build_id: build_id.to_string(),
            dwarf: None,
            symbols_only: None,
            matched: None,
            looked: Vec::new(),
            probes,
        }
    }

    /// The build-id of the file at `path` from its headers alone, probed once per file per run.
    fn probe(&mut self, path: &Path) -> Result<Option<String>, String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        let identity = (meta.dev(), meta.ino(), meta.size(), meta.mtime());
        if let Some((seen, found)) = self.probes.get(path) {
            if *seen == identity {
                return found.clone();
            }
        }
        let found = probe_build_id(path);
        self.probes.insert(path.to_path_buf(), (identity, found.clone()));
        found
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

    /// Reads and checks a candidate; a note in `looked` when it is unreadable or another build's. Only
    /// the headers and the build-id note are read until they show the file is this build's (or, for a
    /// `.gnu_debuglink` target, has no build-id and needs its CRC): a log can name any file as a
    /// module, and none of another build is ever read whole.
    fn read(&mut self, path: &Path, expect: Expect) -> Option<Module> {
        let probed = match self.probe(path) {
            Ok(id) => id.unwrap_or_default(),
            Err(why) => {
                self.looked.push(format!("{} (unreadable: {why})", path.display()));
                return None;
            }
        };
        let may_match = match expect {
            _ if probed == self.build_id => true,
            Expect::Crc(_) => probed.is_empty(),
            Expect::BuildId => false,
        };
        if !may_match {
            let other = if probed.is_empty() { "no build-id".to_string() } else { format!("build-id {probed}") };
            self.looked.push(format!("{} ({other}: another build)", path.display()));
            return None;
        }
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
        if let Some(cache) = self.cache_dir(false) {
            let cached = cache.join(&search.build_id).join(kind);
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
            match self.download(&url, &search.build_id, kind) {
                Ok(cached) => {
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

    /// The cache directory, checked once per run: ours and private, or a fresh private stand-in (with a
    /// note). `None` when nothing is cached yet and `create` is false (a miss creates nothing).
    fn cache_dir(&mut self, create: bool) -> Option<PathBuf> {
        if let Some(dir) = &self.cache_ready {
            return Some(dir.clone());
        }
        let (dir, note) = resolve_cache(&self.cache, create);
        self.notes.extend(note);
        self.cache_ready.clone_from(&dir);
        dir
    }

    /// GETs `<url>/buildid/<id>/<kind>` into the cache (through a new temporary file beside it): the
    /// cached file's path. At most `limits.max_size` bytes within `limits.max_time`, redirects followed
    /// to the same origin only. The transfer runs on a thread of its own so that the deadline holds
    /// whatever the server does (a byte a second keeps every read within `DEBUGINFOD_TIMEOUT`); one
    /// past its deadline is told to stop at its next read and left to finish alone.
    fn download(&mut self, url: &str, build_id: &str, kind: &str) -> Result<PathBuf, Failure> {
        let origin = origin(url).ok_or_else(|| Failure::Down("not an http:// or https:// URL".to_string()))?;
        let timeout = self.timeout;
        let agent = self.agent.get_or_insert_with(|| {
            ureq::AgentBuilder::new()
                .timeout_connect(timeout)
                .timeout_read(timeout)
                // Each redirect is checked here: same origin only.
                .redirects(0)
                .user_agent(concat!("racewatch/", env!("CARGO_PKG_VERSION")))
                .build()
        });
        let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let job = Transfer {
            agent: agent.clone(),
            target: format!("{url}/buildid/{build_id}/{kind}"),
            origin,
            limits: self.limits,
            cache: self.cache.clone(),
            cache_ready: self.cache_ready.clone(),
            build_id: build_id.to_string(),
            kind: kind.to_string(),
            cancel: cancel.clone(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("racewatch-debuginfod".into()).spawn(move || {
            let _ = tx.send(job.run());
        });
        if let Err(e) = spawned {
            return Err(Failure::Answer(format!("cannot start a download: {e}")));
        }
        let max_time = self.limits.max_time;
        let answer = match std::time::Instant::now().checked_add(max_time) {
            Some(_) => rx.recv_timeout(max_time),
            None => rx.recv().map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok((result, cache_ready, note)) => {
                if self.cache_ready.is_none() {
                    self.cache_ready = cache_ready;
                }
                self.notes.extend(note);
                result
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                Err(Failure::Down(format!("no complete answer within DEBUGINFOD_MAXTIME ({}s)", max_time.as_secs())))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(Failure::Answer("the download failed (its thread stopped)".to_string()))
            }
        }
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

/// One file's transfer, on its own thread (see [`Debuginfod::download`]).
struct Transfer {
    agent: ureq::Agent,
    target: String,
    origin: (String, String, u16),
    limits: Limits,
    cache: CacheDir,
    cache_ready: Option<PathBuf>,
    build_id: String,
    kind: String,
    /// Set when the caller stopped waiting: the transfer ends at its next read.
    cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Transfer {
    /// The cached file (or why not), and the cache directory and its note when it was resolved here.
    fn run(self) -> (Result<PathBuf, Failure>, Option<PathBuf>, Option<String>) {
        let mut resolved = (None, None);
        let result = self.fetch(&mut resolved);
        (result, resolved.0, resolved.1)
    }

    fn fetch(&self, resolved: &mut (Option<PathBuf>, Option<String>)) -> Result<PathBuf, Failure> {
        let cancelled = || self.cancel.load(std::sync::atomic::Ordering::Relaxed);
        let stopped = || Failure::Down("stopped at DEBUGINFOD_MAXTIME".to_string());
        let mut target = self.target.clone();
        let mut redirects = 0;
        let response = loop {
            match self.agent.get(&target).call() {
                Ok(response) if (300..400).contains(&response.status()) => {
                    redirects += 1;
                    if redirects > MAX_REDIRECTS {
                        return Err(Failure::Answer(format!("more than {MAX_REDIRECTS} redirects")));
                    }
                    let location = response.header("location").unwrap_or_default().to_string();
                    let next = url::Url::parse(response.get_url()).and_then(|base| base.join(&location));
                    let Ok(next) = next else {
                        return Err(Failure::Answer(format!("redirected to an invalid URL {location:?}")));
                    };
                    if origin_of(&next).as_ref() != Some(&self.origin) {
                        return Err(Failure::Answer(format!(
                            "redirected to another origin, not followed: {}",
                            next.origin().ascii_serialization()
                        )));
                    }
                    target = next.to_string();
                }
                Ok(response) => break response,
                Err(ureq::Error::Status(404, _)) => return Err(Failure::Answer("not found".to_string())),
                Err(ureq::Error::Status(code, response)) => {
                    return Err(Failure::Answer(format!("HTTP {code} {}", response.status_text())))
                }
                Err(ureq::Error::Transport(t)) => return Err(Failure::Down(transport_reason(&t))),
            }
            if cancelled() {
                return Err(stopped());
            }
        };
        let max = self.limits.max_size;
        let too_big = |size: Option<u64>| {
            let max = max.unwrap_or(u64::MAX);
            Failure::Answer(match size {
                Some(size) => format!("{size} bytes, more than DEBUGINFOD_MAXSIZE ({max} bytes); not downloaded"),
                None => format!("more than DEBUGINFOD_MAXSIZE ({max} bytes); the download was stopped there"),
            })
        };
        let declared = response.header("content-length").and_then(|n| n.trim().parse::<u64>().ok());
        if let (Some(declared), Some(max)) = (declared, max) {
            if declared > max {
                return Err(too_big(Some(declared)));
            }
        }
        let cache = match &self.cache_ready {
            Some(dir) => dir.clone(),
            None => {
                *resolved = resolve_cache(&self.cache, true);
                resolved.0.clone().ok_or_else(|| Failure::Answer("no private cache directory".to_string()))?
            }
        };
        let dir = cache.join(&self.build_id);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Failure::Answer(format!("cannot cache in {}: {e}", dir.display()))),
        }
        let to = dir.join(&self.kind);
        let temp = dir.join(format!(".{}.{}.{:016x}.tmp", self.kind, std::process::id(), random()));
        let mut reader = response.into_reader();
        let written = (|| -> Result<(), Failure> {
            let io = |e: std::io::Error| {
                if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock {
                    Failure::Down(format!("download timed out: {e}"))
                } else {
                    Failure::Answer(format!("download failed: {e}"))
                }
            };
            // A new name, never through a link: nothing that was there is written to.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .mode(0o600)
                .open(&temp)
                .map_err(|e| Failure::Answer(format!("cannot cache in {}: {e}", dir.display())))?;
            let mut buf = vec![0u8; 64 << 10];
            let mut total = 0u64;
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io(e)),
                };
                if cancelled() {
                    return Err(stopped());
                }
                total += n as u64;
                if max.is_some_and(|max| total > max) {
                    return Err(too_big(None));
                }
                file.write_all(&buf[..n]).map_err(io)?;
            }
            file.flush().map_err(io)?;
            if cancelled() {
                return Err(stopped());
            }
            std::fs::rename(&temp, &to).map_err(io)
        })();
        match written {
            Ok(()) => Ok(to),
            Err(failure) => {
                let _ = std::fs::remove_file(&temp);
                Err(failure)
            }
        }
    }
}

/// The cache directory `place` stands for, checked (see the module's header), and a note when it is
/// not used; `None` when `create` is false and nothing is there yet.
fn resolve_cache(place: &CacheDir, create: bool) -> (Option<PathBuf>, Option<String>) {
    let temp_name = format!("racewatch-debuginfod-{}", euid());
    let (dir, checked) = match place {
        CacheDir::Given(dir) | CacheDir::Own(dir) if !create && std::fs::symlink_metadata(dir).is_err() => {
            return (None, None)
        }
        CacheDir::Temp if !create && std::fs::symlink_metadata(std::env::temp_dir().join(&temp_name)).is_err() => {
            return (None, None)
        }
        CacheDir::Given(dir) => (dir.clone(), private_dir(dir, false)),
        CacheDir::Own(dir) => {
            let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
            (dir.clone(), private_dir(&parent, true).and_then(|()| private_dir(dir, true)))
        }
        CacheDir::Temp => {
            let dir = std::env::temp_dir().join(&temp_name);
            let checked = private_dir(&dir, true);
            (dir, checked)
        }
    };
    match checked {
        Ok(()) => (Some(dir), None),
        Err(why) => {
            let fresh = fresh_private_dir(&std::env::temp_dir(), &temp_name);
            let instead = match &fresh {
                Ok(fresh) => format!("debug files downloaded in this run are kept in {} instead", fresh.display()),
                Err(e) => format!("downloads are not kept ({e})"),
            };
            (fresh.ok(), Some(format!("debuginfod cache {} not used: {why}; {instead}", dir.display())))
        }
    }
}

/// Why a server gave no file.
enum Failure {
    /// It answered: not found, an HTTP error, a broken download.
    Answer(String),
    /// It could not be reached (or stopped answering): not asked again in this run.
    Down(String),
}

/// The origin (scheme, host, port) of an http:// or https:// URL.
fn origin(url: &str) -> Option<(String, String, u16)> {
    origin_of(&url::Url::parse(url).ok()?)
}

fn origin_of(url: &url::Url) -> Option<(String, String, u16)> {
    let scheme = url.scheme();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    Some((scheme.to_string(), url.host_str()?.to_ascii_lowercase(), url.port_or_known_default()?))
}

/// The effective user id: the owner a cache directory must have.
fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// 64 random bits (the standard library's per-process random hash keys, the time and the pid).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Makes `dir` (mode 0700; missing parents as `mkdir -p`) or checks the one there: the effective
/// user's, and writable by no one else. `own`: racewatch's own directory, which must not be a
/// symbolic link and is made private (mode 0700) when it is not; otherwise (a directory the user
/// named) it is taken as it is when no one else may write it. Why not, in words.
fn private_dir(dir: &Path, own: bool) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        if std::fs::symlink_metadata(parent).is_err() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.to_string()),
    }
    let meta = if own { std::fs::symlink_metadata(dir) } else { std::fs::metadata(dir) };
    let meta = meta.map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() {
        return Err("it is a symbolic link".to_string());
    }
    if !meta.is_dir() {
        return Err("not a directory".to_string());
    }
    if meta.uid() != euid() {
        return Err(format!("owned by uid {}, not by uid {}", meta.uid(), euid()));
    }
    let mode = meta.mode() & 0o7777;
    if own && mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
    } else if mode & 0o022 != 0 {
        return Err(format!("mode {mode:04o}: others may write it"));
    }
    Ok(())
}

/// A new private directory `parent/name.<random>` (mode 0700), made by `mkdir`, which fails when the
/// name exists: no one else can have made it first.
fn fresh_private_dir(parent: &Path, name: &str) -> std::io::Result<PathBuf> {
    let mut last = None;
    for _ in 0..16 {
        let dir = parent.join(format!("{name}.{:016x}", random()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no fresh name")))
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

/// The most bytes [`probe_build_id`] reads in one piece (section headers, their names, the note).
const PROBE_MAX: u64 = 4 << 20;

/// The GNU build-id of the ELF file at `path` (`None`: it has none), as [`Module::build_id`] finds it
/// (the first note of `.note.gnu.build-id`), read from the ELF header, the section headers, the
/// section names and that note alone: a few KiB of any file, never the file whole. An error when the
/// file is not a regular file or not a 64-bit little-endian ELF file.
fn probe_build_id(path: &Path) -> Result<Option<String>, String> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    // Non-blocking: a FIFO put where a file was does not hang the run.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?;
    if !len.is_file() {
        return Err("not a regular file".to_string());
    }
    let len = len.len();
    let read = |offset: u64, size: u64| -> Result<Vec<u8>, String> {
        let end = offset.checked_add(size).filter(|&end| end <= len && size <= PROBE_MAX);
        let Some(_) = end else { return Err("malformed ELF: a header points past the end of the file".to_string()) };
        let mut buf = vec![0u8; size as usize];
        file.read_exact_at(&mut buf, offset).map_err(|e| e.to_string())?;
        Ok(buf)
    };
    let header = read(0, 64.min(len))?;
    if header.len() < 64 || header[..4] != *b"\x7fELF" {
        return Err("not an ELF file".to_string());
    }
    if header[4] != 2 || header[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".to_string());
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let (shoff, shentsize) = (u64_at(&header, 40), u64::from(u16_at(&header, 58)));
    if shoff == 0 {
        return Ok(None);
    }
    if shentsize != 64 {
        return Err("malformed ELF: section header size".to_string());
    }
    // Section 0 holds the real count and string table index when they do not fit the header.
    let first = read(shoff, 64)?;
    let shnum = match u16_at(&header, 60) {
        0 => u64_at(&first, 32),
        n => u64::from(n),
    };
    let shstrndx = match u16_at(&header, 62) {
        0xffff => u64::from(u32_at(&first, 40)),
        n => u64::from(n),
    };
    let table = read(shoff, shnum.checked_mul(64).ok_or("malformed ELF: section count")?)?;
    let section = |i: u64| table.get(i as usize * 64..i as usize * 64 + 64);
    let Some(strtab) = section(shstrndx) else { return Ok(None) };
    let names = read(u64_at(strtab, 24), u64_at(strtab, 32).min(PROBE_MAX))?;
    const NAME: &[u8] = b".note.gnu.build-id\0";
    for i in 0..shnum {
        let Some(sh) = section(i) else { break };
        let name_at = u32_at(sh, 0) as usize;
        if names.get(name_at..name_at + NAME.len()) != Some(NAME) {
            continue;
        }
        const SHT_NOBITS: u32 = 8;
        if u32_at(sh, 4) == SHT_NOBITS {
            return Ok(None);
        }
        let note = read(u64_at(sh, 24), u64_at(sh, 32).min(4096))?;
        let word = |at: usize| note.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let (Some(name_size), Some(desc_size)) = (word(0), word(4)) else { return Ok(None) };
        let desc_start = 12 + name_size.div_ceil(4) * 4;
        let id = desc_start.checked_add(desc_size).and_then(|end| note.get(desc_start..end));
        return Ok(id.map(|id| id.iter().map(|b| format!("{b:02x}")).collect()).filter(|id: &String| !id.is_empty()));
    }
    Ok(None)
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
            ("DEBUGINFOD_MAXSIZE", "1000"),
            ("DEBUGINFOD_MAXTIME", "7"),
        ]));
        assert_eq!(
            config,
            Config {
                urls: vec!["https://debuginfod.debian.net".into(), "http://127.0.0.1:8002".into()],
                cache: CacheDir::Given("/var/cache/dbg".into()),
                timeout: Duration::from_secs(3),
                limits: Limits { max_size: Some(1000), max_time: Duration::from_secs(7) },
            }
        );
        let config = Config::from_vars(vars(&[("XDG_CACHE_HOME", "/home/u/.xdg"), ("DEBUGINFOD_TIMEOUT", "soon")]));
        assert!(config.urls.is_empty());
        assert_eq!(config.cache, CacheDir::Own("/home/u/.xdg/racewatch/debuginfod".into()));
        assert_eq!(config.timeout, Duration::from_secs(DEFAULT_TIMEOUT_SECS));
        assert_eq!(config.limits, Limits::default());
        // A relative XDG_CACHE_HOME is invalid (XDG base directory spec): HOME decides. 0: no limit.
        let config = Config::from_vars(vars(&[
            ("XDG_CACHE_HOME", "rel"),
            ("HOME", "/home/u"),
            ("DEBUGINFOD_URLS", " "),
            ("DEBUGINFOD_MAXSIZE", "0"),
        ]));
        assert!(config.urls.is_empty());
        assert_eq!(config.cache, CacheDir::Own("/home/u/.cache/racewatch/debuginfod".into()));
        assert_eq!(config.limits.max_size, None);
        // No HOME: never a shared name trusted as found.
        assert_eq!(Config::from_vars(vars(&[])).cache, CacheDir::Temp);
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
