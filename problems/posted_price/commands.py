"""Posted pricing's part of ``advonline archive``: how an archived instance is listed."""

from __future__ import annotations

from advonline.problems.posted_price.model import Setting


def archive_title(setting_: Setting) -> str:
    """The setting as the archive's listing names it."""
    return (
        f"K = {setting_.resources}, densities [{setting_.low:g}, {setting_.high:g}], "
        f"T = {setting_.rounds}"
    )


#: The columns the archive's listing adds for each instance (from the game's summaries).
ARCHIVE_COLUMNS = ("buyers", "densities")


def archive_cells(row: dict) -> tuple:
    """An archived instance's own cells, from its summary."""
    if row["buyers"] == 0:
        return row["buyers"], "-"
    return row["buyers"], f"{row['lowest_density']:.3g}-{row['highest_density']:.3g}"
