import sys

from pigviz.cli import main

sys.exit(main())
