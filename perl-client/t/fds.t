#!/usr/bin/perl
# A caller with file descriptors 0, 1 or 2 closed (not redirected: closed, as some daemons
# leave them) uses the drop-in as any other: the server starts and answers right, its answers
# never show up on the caller's stderr, and the caller's descriptors 0 to 2 stay free for it to
# reopen (the client's pipes take higher ones).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use PVE::RS::ResourceScheduling::Static;

my $DIR = tempdir(CLEANUP => 1);
my $LIB = "$FindBin::Bin/../lib";

# The child: closes the descriptors it is told to (after pointing fd 2 at a file when it stays
# open), uses the drop-in, then reopens STDIN and STDOUT and reports, to the file named by
# CRS_TEST_REPORT: the imbalance, the start scores, and the descriptors STDIN/STDOUT got.
my $CHILD = <<'PERL';
use strict;
use warnings;
use POSIX ();
use PVE::RS::ResourceScheduling::Static;
my ($report, $errfile, @closed) = @ARGV;
open(STDERR, '>>', $errfile) or die "stderr: $!";
for my $fd (@closed) {
    close(STDIN) if $fd == 0;
    close(STDOUT) if $fd == 1;
    close(STDERR) if $fd == 2;
    POSIX::close($fd);
}
my @lines;
my $ok = eval {
    my $u = PVE::RS::ResourceScheduling::Static->new();
    $u->add_node($_->[0], $_->[1], $_->[2] * 2**30) for [ a => 16, 64 ], [ b => 8, 32 ], [ c => 32, 128 ];
    $u->add_service("vm:$_", { stats => { maxcpu => $_, maxmem => $_ * 2**30 }, running => 1, 'current-node' => 'a' })
        for 1 .. 5;
    push @lines, sprintf('%.17g', $u->calculate_node_imbalance);
    push @lines, join(',', map { "$_->[0]=" . sprintf('%.17g', $_->[1]) }
        @{ $u->score_nodes_to_start_service({ maxcpu => 2, maxmem => 2**30 }) });
    1;
};
push @lines, $ok ? 'no error' : "error: $@";
open(STDIN, '<', '/dev/null') or die;
open(STDOUT, '>', '/dev/null') or die;
push @lines, 'stdin ' . fileno(STDIN) . ' stdout ' . fileno(STDOUT);
open(my $fh, '>', $report) or die "report: $!";
print {$fh} map { "$_\n" } @lines;
close($fh);
PERL

sub expected {
    my $u = PVE::RS::ResourceScheduling::Static->new();
    $u->add_node($_->[0], $_->[1], $_->[2] * GiB) for [ a => 16, 64 ], [ b => 8, 32 ], [ c => 32, 128 ];
    $u->add_service("vm:$_", { stats => { maxcpu => $_, maxmem => $_ * GiB }, running => 1, 'current-node' => 'a' })
        for 1 .. 5;
    return [ sprintf('%.17g', $u->calculate_node_imbalance),
        join(',', map { "$_->[0]=" . sprintf('%.17g', $_->[1]) }
            @{ $u->score_nodes_to_start_service({ maxcpu => 2, maxmem => GiB }) }),
        'no error', 'stdin 0 stdout 1' ];
}

my $expected = expected();

for my $closed ([0], [1], [2], [ 0, 1 ], [ 1, 2 ], [ 0, 1, 2 ]) {
    my $name = 'closed fd ' . join(' and ', @$closed);
    my ($report, $errfile) = ("$DIR/report", "$DIR/stderr");
    unlink($report, $errfile);
    system($^X, "-I$LIB", '-e', $CHILD, $report, $errfile, @$closed);
    is($?, 0, "$name: the caller exited cleanly");
    open(my $fh, '<', $report) or do { fail("$name: no report ($!)"); next };
    chomp(my @got = <$fh>);
    is_deeply(\@got, $expected, "$name: right answers, no error, fds 0 and 1 free to reopen");
    my $stderr = -e $errfile ? do { local (@ARGV, $/) = ($errfile); <> } : '';
    unlike($stderr, qr/jsonrpc/, "$name: no answer leaked onto the caller's stderr");
}

done_testing();
