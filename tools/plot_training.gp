# Plots a ps_worker history.csv (step,samples,train_loss,train_auc,test_auc,
# test_logloss,seconds) as a PNG: training loss on the left axis, train and
# test AUC on the right.
#   gnuplot -e "history='out/history.csv'; output='out/training.png'; bayes=0.88" tools/plot_training.gp
if (!exists("history")) history = "history.csv"
if (!exists("output")) output = "training.png"
if (!exists("bayes")) bayes = 0
set terminal pngcairo size 1000,560 font "sans,11"
set output output
set datafile separator ","
set key outside bottom center horizontal
set title "embedps DLRM training"
set xlabel "step"
set ylabel "training loss (log loss)"
set y2label "AUC"
set ytics nomirror
set y2tics
set grid
plot history using 1:3 skip 1 with lines lw 2 title "train loss", \
     history using 1:4 skip 1 axes x1y2 with lines lw 2 title "train AUC (window)", \
     history using 1:5 skip 1 axes x1y2 with linespoints pt 7 ps 1.2 lw 2 title "test AUC", \
     (bayes > 0 ? bayes : NaN) axes x1y2 with lines dt 2 lw 2 title "Bayes-optimal test AUC"
