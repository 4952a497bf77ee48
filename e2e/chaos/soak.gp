# The soak's plot: each replica's resident memory, goroutines and open streams over time,
# the faults as grey lines. gnuplot -e "dir='bin/soak'" e2e/chaos/soak.gp writes
# dir/soak.png from dir/soak.csv (minutes replica incarnation rss_mib goroutines
# ingress_streams egress_streams) and dir/faults.csv.
if (!exists("dir")) dir = "bin/soak"
data = dir."/soak.csv"
faults = dir."/faults.csv"
set terminal pngcairo size 1200,1100 font ",10"
set output dir."/soak.png"
set multiplot layout 3,1 title "make soak: three replicas behind HAProxy"
set grid
set key outside right
set xlabel "minutes"
set y2range [0:1]
unset y2tics
set ylabel "resident memory (MiB)"
set yrange [0:*]
plot for [r in "r1 r2 r3"] data using 1:(strcol(2) eq r ? $4 : NaN) with points pt 7 ps 0.5 title r, \
     faults using 1:(1) axes x1y2 with impulses lc rgb "gray" title "faults"
set ylabel "goroutines"
plot for [r in "r1 r2 r3"] data using 1:(strcol(2) eq r ? $5 : NaN) with points pt 7 ps 0.4 title r, \
     faults using 1:(1) axes x1y2 with impulses lc rgb "gray" title "faults"
set ylabel "open streams (ingress + egress)"
plot for [r in "r1 r2 r3"] data using 1:(strcol(2) eq r ? $6+$7 : NaN) with points pt 7 ps 0.4 title r, \
     faults using 1:(1) axes x1y2 with impulses lc rgb "gray" title "faults"
unset multiplot
