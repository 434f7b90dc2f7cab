//! Checks shared by the discovery tests.

use rivet_discover::{CfiRows, DiscoverOptions, Instructions, Models, discover, discover_models};
use rivet_elf::ElfFile;
use rivet_ir::{FuncId, Program};

/// Discovery that keeps the model of some families only (`Models::NamedFamilies`, with
/// instructions set aside: profile-guided optimize) must give the model of discovering every
/// function and then releasing the others: every field of every function the same once the
/// kept ones' instructions are decoded again. Every third function is picked, so that the
/// families of cold parts, tail calls, noreturn callees and jump tables fall on both sides.
/// Returns how many functions were kept and released.
pub fn assert_named_families_match(name: &str, elf: &ElfFile<'_>) -> (usize, usize) {
    let picked = |p: &Program| -> Vec<FuncId> {
        p.functions
            .iter()
            .filter(|f| f.id.0 % 3 == 0)
            .map(|f| f.id)
            .collect()
    };
    let options = DiscoverOptions {
        cfi: CfiRows::Check,
        instructions: Instructions::SetAside,
    };
    let mut lean = discover_models(elf, &options, Models::NamedFamilies(&picked))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    lean.restore_instructions(elf, |_| true);
    let mut whole = discover(elf, &DiscoverOptions::with_cfi(CfiRows::Check))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let kept = whole.families_holding(picked(&whole));
    whole.release(|f| !kept[f.id.0 as usize]);
    assert_eq!(lean.functions.len(), whole.functions.len(), "{name}");
    for (a, b) in lean.functions.iter().zip(&whole.functions) {
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{name}: {}", a.name());
    }
    assert_eq!(lean.warnings, whole.warnings, "{name}");
    let released = whole.functions.iter().filter(|f| f.is_released()).count();
    (whole.functions.len() - released, released)
}
