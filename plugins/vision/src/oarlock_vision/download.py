"""oarlock.utils.download: Paddle's get_weights_path_from_url / get_path_from_url.

A file already under the root directory (named as the URL's last component) whose MD5 matches is used as it
is, so weights put there by hand, or by a Paddle installation sharing the same cache
(~/.cache/paddle/hapi/weights), work offline. Otherwise the file is fetched with urllib (Paddle's three
tries); when that fails the error names the URL, the reason and the path to put the file at. Downloaded zip
and tar archives are unpacked next to them, as Paddle does.
"""

from __future__ import annotations

import hashlib
import os
import os.path as osp
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile

WEIGHTS_HOME = osp.expanduser("~/.cache/paddle/hapi/weights")
DOWNLOAD_RETRY_LIMIT = 3
DOWNLOAD_TIMEOUT_S = 30


def is_url(path: str) -> bool:
    """Whether `path` is an http(s) URL."""
    return isinstance(path, str) and path.startswith(("http://", "https://"))


def get_weights_path_from_url(url: str, md5sum: str | None = None) -> str:
    """The local path of the weights at `url` under WEIGHTS_HOME, downloading them if they are not there."""
    return get_path_from_url(url, WEIGHTS_HOME, md5sum)


def md5_matches(path: str, md5sum: str | None) -> bool:
    if md5sum is None:
        return True
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() == md5sum


def get_path_from_url(url: str, root_dir: str, md5sum: str | None = None, check_exist: bool = True,
                      decompress: bool = True, method: str = "get") -> str:
    """The file for `url` under `root_dir` (its last path component): used if present and its MD5 matches
    `md5sum` (when given), else downloaded; zip and tar archives are unpacked and the unpacked path returned."""
    if not is_url(url):
        raise ValueError(f"get_path_from_url: url must be an http:// or https:// URL, got {url!r}")
    if method not in ("get", "wget"):
        raise ValueError(f"get_path_from_url: method must be 'get' or 'wget', got {method!r}")
    fullpath = osp.join(root_dir, osp.split(url)[-1])
    if not (osp.exists(fullpath) and check_exist and md5_matches(fullpath, md5sum)):
        _download(url, fullpath, md5sum)
    if decompress and osp.isfile(fullpath) and (tarfile.is_tarfile(fullpath) or zipfile.is_zipfile(fullpath)):
        return _decompress(fullpath)
    return fullpath


def _download(url, fullpath, md5sum):
    os.makedirs(osp.dirname(fullpath) or ".", exist_ok=True)
    errors = []
    for _ in range(DOWNLOAD_RETRY_LIMIT):
        try:
            # write to a temporary name in the same directory, then rename: no half file is ever found
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, tempfile.NamedTemporaryFile(
                    dir=osp.dirname(fullpath) or ".", delete=False) as out:
                shutil.copyfileobj(response, out)
            os.replace(out.name, fullpath)
        except OSError as err:  # URLError and socket errors are OSErrors
            errors.append(f"{type(err).__name__}: {err}")
            continue
        if md5_matches(fullpath, md5sum):
            return
        errors.append(f"the downloaded file's MD5 is not {md5sum}")
    raise RuntimeError(
        f"get_path_from_url: could not download {url} after {DOWNLOAD_RETRY_LIMIT} tries ({errors[-1]}). To use "
        f"it offline, put the file at {fullpath}" + (f" (MD5 {md5sum})" if md5sum else ""))


def _decompress(fullpath):
    """Unpack an archive into its directory; the path of its single top-level entry, else of a directory named
    after the archive holding everything."""
    root = osp.dirname(fullpath)
    if tarfile.is_tarfile(fullpath):
        with tarfile.open(fullpath) as archive:
            names = archive.getnames()
            target = _target(root, fullpath, names)
            archive.extractall(target if target != root else root, filter="data")
    else:
        with zipfile.ZipFile(fullpath) as archive:
            names = archive.namelist()
            target = _target(root, fullpath, names)
            archive.extractall(target if target != root else root)
    tops = {n.strip("/").split("/")[0] for n in names if n.strip("/")}
    return osp.join(root, tops.pop()) if len(tops) == 1 else target


def _target(root, fullpath, names):
    tops = {n.strip("/").split("/")[0] for n in names if n.strip("/")}
    if len(tops) == 1:
        return root
    return osp.join(root, osp.basename(fullpath).split(".")[0])
