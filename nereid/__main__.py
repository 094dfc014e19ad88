from nereid.cli import main

raise SystemExit(main())
