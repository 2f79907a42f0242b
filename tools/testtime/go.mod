module github.com/nbs-project/nbs/tools/testtime

go 1.26
