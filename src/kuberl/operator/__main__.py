from kuberl.operator.main import main

raise SystemExit(main())
