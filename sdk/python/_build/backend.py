"""A PEP 517 build backend that needs nothing but the standard library, so that
`pip install ./sdk/python` works offline and without setuptools' wheel support."""

import base64
import hashlib
import os
import tarfile
import zipfile

NAME = "meshflows"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: MeshFlows provider SDK and discovery client (standard library only)
License: Apache-2.0
Requires-Python: >=3.9
"""

WHEEL = """Wheel-Version: 1.0
Generator: meshflows-backend
Root-Is-Purelib: true
Tag: py3-none-any
"""


def _sources():
    pkg = os.path.join(ROOT, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            yield f"{NAME}/{name}", os.path.join(pkg, name)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist_info = f"{NAME}-{VERSION}.dist-info"
    filename = f"{NAME}-{VERSION}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as whl:
        def add(arcname, data):
            whl.writestr(arcname, data)
            records.append(_record_line(arcname, data))
        for arcname, path in _sources():
            with open(path, "rb") as f:
                add(arcname, f.read())
        add(f"{dist_info}/METADATA", METADATA.encode())
        add(f"{dist_info}/WHEEL", WHEEL.encode())
        add(f"{dist_info}/top_level.txt", (NAME + "\n").encode())
        records.append(f"{dist_info}/RECORD,,")
        whl.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return filename


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md"]:
            tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        for arcname, path in _sources():
            tar.add(path, arcname=f"{base}/{arcname}")
        tar.add(os.path.join(ROOT, "_build", "backend.py"), arcname=f"{base}/_build/backend.py")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        import io
        tar.addfile(info, io.BytesIO(data))
    return filename
