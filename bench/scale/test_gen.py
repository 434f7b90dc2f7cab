#!/usr/bin/env python3
"""Tests of bench/scale: the driver gen.py writes and synth_profile.py pick the same units.

Run: python3 bench/scale/test_gen.py   (needs gcc; about a second)
"""
import os, subprocess, sys, tempfile, unittest

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402
import synth_profile  # noqa: E402

STUBS = """
unsigned hub_reports;
unsigned hub_mix(unsigned a, unsigned b) { return a * 31u + b; }
unsigned hub_twist(unsigned x) { return x; }
void hub_report(int unit, unsigned x) { (void)unit; (void)x; }
"""


class DriverSelection(unittest.TestCase):
    def test_driver_and_synth_pick_the_same_units(self):
        nmod, units = 7, 300
        with tempfile.TemporaryDirectory() as d:
            gen.write_driver(os.path.join(d, "driver.c"), nmod, units)
            with open(os.path.join(d, "stubs.c"), "w") as f:
                f.write(STUBS)
                # each module's dispatcher records which unit ran, in a bitmap printed at exit
                f.write("#include <stdio.h>\nstatic unsigned char ran[%d][%d];\n" % (nmod, units))
                for k in range(nmod):
                    f.write(f"unsigned zq{k:05d}_run(unsigned u, unsigned x) {{ ran[{k}][u] = 1; return x ^ u; }}\n")
                f.write("__attribute__((destructor)) static void dump(void) {\n"
                        f"    for (int k = 0; k < {nmod}; k++)\n"
                        f"        for (int u = 0; u < {units}; u++)\n"
                        "            if (ran[k][u]) fprintf(stderr, \"%d %d\\n\", k, u);\n}\n")
            exe = os.path.join(d, "prog")
            subprocess.run(["gcc", "-O1", "-o", exe, os.path.join(d, "driver.c"), os.path.join(d, "stubs.c")],
                           check=True)
            r = subprocess.run([exe], capture_output=True, text=True, check=True)
        ran = {tuple(map(int, line.split())) for line in r.stderr.split("\n") if line}
        want = {(k, u) for k in range(nmod) for u in range(units) if synth_profile.selected(k, u)}
        self.assertEqual(ran, want)
        # about HOT_PERMILLE of the units
        share = len(want) / (nmod * units)
        self.assertTrue(0.10 < share < 0.20, share)


class Owners(unittest.TestCase):
    def test_names(self):
        o = synth_profile.owner
        self.assertEqual(o("zq00012_sw7"), (12, 7))
        self.assertEqual(o("zq00012_leaf7a/1"), (12, 7))
        self.assertEqual(o("zq00012_fail480/1"), (12, 480))
        self.assertEqual(o("_ZN7zq000125step33Ej"), (12, 33))
        self.assertEqual(o("zq00012_run"), (12, None))
        self.assertEqual(o("zq00012_sw7.constprop.0"), (12, 7))
        self.assertIsNone(o("hub_mix"))
        self.assertIsNone(o("main"))


if __name__ == "__main__":
    unittest.main()
