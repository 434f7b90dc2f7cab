//! The names profiles give functions, following BOLT's fdata conventions so that profiles
//! move between the two tools: a global function by its symbol name, a local one by its name
//! and a number telling apart locals of the same name (`helper/1`, `helper/2`, in symbol
//! order), PLT stubs as `puts@PLT`.

use std::collections::HashMap;

use rivet_ir::Program;

/// The profile name of every function, indexed by `FuncId`.
pub fn profile_names(program: &Program) -> Vec<String> {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    program
        .functions
        .iter()
        .map(|f| {
            let name = f.name();
            if f.is_local {
                let n = seen.entry(name).or_insert(0);
                *n += 1;
                format!("{name}/{n}")
            } else {
                name.to_string()
            }
        })
        .collect()
}

/// (address, profile name) of every function and PLT stub, sorted by address.
pub fn symbol_table(program: &Program) -> Vec<(u64, String)> {
    let names = profile_names(program);
    let mut table: Vec<(u64, String)> = program
        .functions
        .iter()
        .map(|f| (f.range.start.get(), names[f.id.0 as usize].clone()))
        .chain(
            program
                .plt
                .iter()
                .map(|p| (p.addr.get(), format!("{}@PLT", p.name))),
        )
        .collect();
    table.sort();
    table.dedup_by_key(|e| e.0);
    table
}
