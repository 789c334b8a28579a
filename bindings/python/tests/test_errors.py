"""Error model, version and ABI checks of the eldr package."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

import eldr


def test_every_status_has_its_class_and_the_library_name() -> None:
    for status in eldr.Status:
        if status == eldr.Status.OK:
            assert eldr.status_name(0) == "ELDR_OK"
            continue
        cls = eldr.error_class(status)
        assert cls is not eldr.Error and issubclass(cls, eldr.Error)
        err = cls("detail", status)
        assert err.status == status and err.name == eldr.status_name(status)
        assert err.name == "ELDR_E_" + status.name
        assert eldr.status_string(status)  # a description from the library
    assert eldr.error_class(-999) is eldr.Error
    assert eldr.Error("x", -999).name == "ELDR_E_UNKNOWN" == eldr.status_name(-999)


def test_argument_errors_are_value_errors() -> None:
    for cls in (eldr.InvalidArgument, eldr.ShapeMismatch, eldr.OutOfRange):
        assert issubclass(cls, ValueError)
    assert eldr.Timeout("t").status == -13  # the class's status by default


def test_errors_pickle_with_their_status() -> None:
    err = pickle.loads(pickle.dumps(eldr.RingFull("ring full", -12)))
    assert type(err) is eldr.RingFull and err.status == -12 and str(err) == "ring full"


def test_library_errors_carry_status_name_and_message(tmp_path) -> None:
    with pytest.raises(eldr.Error) as info:
        eldr.Table.load(tmp_path / "missing.eldr")
    assert isinstance(info.value, eldr.IoError)
    assert (info.value.status, info.value.name) == (-4, "ELDR_E_IO")
    assert info.value.message and "IoError" in repr(info.value)


def test_version_and_abi() -> None:
    major, minor, patch = (int(x) for x in eldr.__version__.split("."))
    assert eldr.version_number() == major * 10000 + minor * 100 + patch
    assert eldr.abi_version() == eldr.ABI_VERSION
    assert isinstance(eldr.cuda_available(), bool)


def test_abi_mismatch_fails_the_import_check() -> None:
    eldr._eldr._check_abi(eldr.ABI_VERSION)
    with pytest.raises(ImportError, match="ABI version"):
        eldr._eldr._check_abi(eldr.ABI_VERSION + 1)


def test_package_imports_in_a_fresh_interpreter() -> None:
    out = subprocess.run([sys.executable, "-c", "import eldr; print(eldr.__version__)"],
                         capture_output=True, text=True, env=os.environ, check=True)
    assert out.stdout.strip() == eldr.__version__


def test_package_ships_its_type_information() -> None:
    # PEP 561: py.typed, and the extension's stubs next to it (python.stubs
    # checks them against the extension itself).
    package = os.path.dirname(eldr.__file__)
    for name in ("py.typed", "_eldr.pyi"):
        assert os.path.isfile(os.path.join(package, name)), f"{name} missing from {package}"

