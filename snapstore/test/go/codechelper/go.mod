module etcdbrctl.test/codechelper

go 1.19
