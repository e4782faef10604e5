"""Where the command line keeps JAX's persistent compilation cache, and when it leaves it off."""

from pathlib import Path

import jax

from advonline import compilation_cache


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation_cache.VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache.folder() == tmp_path / "xdg" / "advonline" / "jax"
    monkeypatch.setenv(compilation_cache.VARIABLE, str(tmp_path / "mine"))
    assert compilation_cache.folder() == tmp_path / "mine"
    monkeypatch.setenv(compilation_cache.VARIABLE, "OFF")
    assert compilation_cache.folder() is None


def test_a_cache_jax_was_given_is_kept(monkeypatch, tmp_path):
    """The test session gives JAX its own cache folder: the command line keeps it."""
    given = jax.config.jax_compilation_cache_dir
    assert given
    monkeypatch.setenv(compilation_cache.VARIABLE, str(tmp_path / "other"))
    assert compilation_cache.enable() == Path(given)
    assert jax.config.jax_compilation_cache_dir == given
    assert not (tmp_path / "other").exists()
