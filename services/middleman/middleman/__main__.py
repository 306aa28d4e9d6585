"""python -m middleman (the image's ``inferline-middleman``): the public KServe v2 API
(``classifier``, each classifier of the model repository by name, ``classifier_video``)."""

from inferline.catalog import CatalogError
from inferline.main import run
from middleman import app
from middleman.config import PREFIX, Config


def main() -> None:
    run("middleman", Config, PREFIX, app.start, __doc__, fatal=(CatalogError,))


if __name__ == "__main__":
    main()
