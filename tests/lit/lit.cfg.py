# lit configuration of MegaTrain's FileCheck tests.
import os

import lit.formats

config.name = "MegaTrain"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.megatrain_obj_root, "tests", "lit")

config.environment["PATH"] = os.pathsep.join(
    [config.megatrain_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("%samples", os.path.join(config.megatrain_src_root, "samples")))
