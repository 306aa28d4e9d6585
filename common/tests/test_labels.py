from pathlib import Path

import pytest

from inferline.labels import imagenet_labels, load_labels


def test_thousand_labels_first_synonym() -> None:
    labels = imagenet_labels()
    assert len(labels) == 1000
    assert labels[0] == "tench"
    assert labels[281] == "tabby"
    assert labels[282] == "tiger cat"
    assert labels[285] == "Egyptian cat"
    assert labels[999] == "toilet tissue"
    assert all(label and "," not in label and "\n" not in label for label in labels)


def test_label_file(tmp_path: Path) -> None:
    path = tmp_path / "labels.txt"
    path.write_text("cat\ndog\n\n")
    assert load_labels(str(path)) == ("cat", "dog")
    assert load_labels("") == imagenet_labels()
    with pytest.raises(ValueError, match="cannot read label file"):
        load_labels(str(tmp_path / "missing.txt"))
