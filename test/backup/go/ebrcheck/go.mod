module etcdbrctl.test/ebrcheck

go 1.19
